"""Reads from MariaDB: its catalog, rows, a table's bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql  # type: ignore[import-untyped]

from cdcsync.sources.base import SourceSettings, TableName
from cdcsync.sources.mariadb.connection import connect, fetch
from cdcsync.sources.mariadb.snapshot import MariaDBRead
from cdcsync.sources.reads import Columns, Reads

TYPES = {
    "decimal": "decimal",
    "date": "date",
    "time": "duration",  # -838:59:59.999999 to 838:59:59.999999, not a time of day
    "datetime": "timestamp",
    "timestamp": "timestamp",
    "blob": "bytes",
    "tinyblob": "bytes",
    "mediumblob": "bytes",
    "longblob": "bytes",
    "binary": "bytes",
    "varbinary": "bytes",
    "uuid": "uuid",
    "tinyint": "int",
    "smallint": "int",
    "mediumint": "int",
    "int": "int",
    "bigint": "int",
    "year": "int",
    "bit": "bits",  # Debezium sends YEAR as a number, the driver reads it as one
    "point": "point",
    **dict.fromkeys(
        ("geometry", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"),
        "geometry",
    ),
    "float": "float",
    "double": "float",
}


class MariaDBReads(Reads):
    jdbc_driver = "org.mariadb.jdbc.Driver"
    # A BIT as its digits, written so by the piece's select (``MariaDBRead.relation``); spatial values arrive
    # as bytes.
    jdbc_text_kinds = frozenset({"bits"})

    def jdbc_url(self, source: SourceSettings) -> str:
        # The mysql scheme makes Spark pick its MySQL dialect (backtick quoting); the MariaDB driver accepts it.
        return f"jdbc:mysql://{source.host}:{source.port}/{source.database}?permitMysqlScheme&allowMultiQueries=true"

    def hash_bucket(self, quoted_keys: list[str]) -> str:
        return f"CRC32(CONCAT_WS('|', {', '.join(quoted_keys)}))"

    def snapshot(self, source: SourceSettings) -> MariaDBRead:
        return MariaDBRead(source)

    def columns(self, source: SourceSettings, table: TableName) -> Columns:
        conn = connect(source)
        with conn, conn.cursor() as cur:
            # COLUMN_DEFAULT: SQL NULL for no default on a NOT NULL column, the text 'NULL' for DEFAULT NULL.
            cur.execute(
                "SELECT column_name, data_type, column_type, column_default IS NOT NULL AND column_default <>"
                " 'NULL', datetime_precision, numeric_precision, numeric_scale, extra LIKE '%%GENERATED%%'"
                " FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                (table.namespace, table.table),
            )
            rows = cur.fetchall()
            cur.execute(
                "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s"
                " AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
                (table.namespace, table.table),
            )
            key = cur.fetchall()
            cur.execute(
                "SELECT constraint_name, check_clause FROM information_schema.check_constraints"
                " WHERE constraint_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            )
            # MariaDB's JSON is LONGTEXT with a json_valid() check named after the column.
            json_columns = {name for name, clause in cur.fetchall() if "json_valid" in clause.lower()}
        types = {}
        unlogged = frozenset(row[0] for row in rows if row[7])
        rows = [row for row in rows if not row[7]]
        filled = frozenset(row[0] for row in rows if row[3])
        # Debezium counts a DATETIME(0) to (3) in milliseconds, a DATETIME(4) to (6) in microseconds.
        millis = frozenset(row[0] for row in rows if row[1].lower() == "datetime" and (row[4] or 0) <= 3)
        decimals = {row[0]: (row[5], row[6]) for row in rows if _fixed_decimal(row[1], row[2], row[5])}
        widths = {row[0]: row[5] for row in rows if row[1].lower() == "bit" and row[5]}
        for name, kind, column_type, *_ in rows:
            types[name] = (
                "json"
                if name in json_columns
                else ("bool" if column_type.lower() == "tinyint(1)" else _mariadb_type(kind, column_type))
            )
        return Columns(types, tuple(k[0] for k in key), filled, millis, decimals, widths, unlogged)

    def every_column(self, source: SourceSettings, table: TableName) -> str:
        """``*``, and its INVISIBLE columns, which ``*`` leaves out and the binlog carries."""
        hidden = fetch(
            source,
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
            " AND extra LIKE '%%INVISIBLE%%' ORDER BY ordinal_position",
            (table.namespace, table.table),
        )
        return ", ".join(["*", *("`" + str(c).replace("`", "``") + "`" for (c,) in hidden)])

    def stream(self, source: SourceSettings, query: str) -> Iterator[dict[str, Any]]:
        conn = connect(source)
        with conn, conn.cursor(pymysql.cursors.SSDictCursor) as cur:
            cur.execute(query)
            for row in cur:
                yield dict(row)

    def page(self, source: SourceSettings, query: str, params: tuple[Any, ...] | None) -> list[dict[str, Any]]:
        conn = connect(source)
        with conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(query, params)
            return [dict(row) for row in cur.fetchall()]

    def table_bytes(self, source: SourceSettings, table: TableName) -> int:
        found = fetch(
            source,
            "SELECT data_length + index_length FROM information_schema.tables WHERE table_schema = %s"
            " AND table_name = %s",
            (table.namespace, table.table),
        )
        return int(found[0][0] or 0) if found else 0


def _fixed_decimal(data_type: str, column_type: str, precision: int | None) -> bool:
    """A MariaDB DECIMAL(p,s) or BIGINT UNSIGNED (20 digits) that a DECIMAL of at most 38 digits holds."""
    is_decimal = data_type.lower() == "decimal" or _mariadb_type(data_type, column_type) == "decimal"
    return is_decimal and precision is not None and precision <= 38


def _mariadb_type(data_type: str, column_type: str) -> str:
    # BIGINT UNSIGNED reaches 2^64 - 1, past a signed 64-bit integer: Debezium sends it as a decimal
    # (bigint.unsigned.handling.mode=precise), and every store keeps it as one.
    if data_type.lower() == "bigint" and "unsigned" in column_type.lower():
        return "decimal"
    return TYPES.get(data_type.lower(), "text")
