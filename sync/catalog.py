"""Read each followed table's columns from its source database, to build its mapping.

Debezium's schemaless JSON does not say that ``"2024-02-29Z"`` is a date; the
source catalog does. A follower reads it once at start; a mapping's ``types``
override what it finds. The same reader serves ``verify``, which also reads
the rows themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import pymysql  # type: ignore[import-untyped]
from psycopg.rows import dict_row

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.db import connect_mariadb, connect_postgres, fetch
from cdcsync.errors import FatalError
from cdcsync.names import default_target
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.source_loaders import reading

PAGE_ROWS = 5000  # rows per query of ``source_pages``
POSTGRES_TYPES = {
    "numeric": "decimal",
    "date": "date",
    "time without time zone": "time",
    "time with time zone": "time",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamp",
    "json": "json",
    "jsonb": "json",
    "bytea": "bytes",
    "boolean": "bool",
    "uuid": "uuid",
    "smallint": "int",
    "integer": "int",
    "bigint": "int",
    "real": "float",
    "double precision": "float",
    "ARRAY": "array",
    "point": "point",
    "interval": "interval",
    "money": "decimal",
    "bit": "bits",  # as Postgres writes them, '0101' (sync.values.bits_text)
    "bit varying": "bits",  # Debezium sends the digits (decimal.handling.mode=string); verify reads them so too
    # Types Debezium has no form of its own for: sent as the bytes of Postgres' text (include.unknown.datatypes)
    **dict.fromkeys(("pg_lsn", "tsquery", "txid_snapshot", "composite"), "pg_text"),
    **dict.fromkeys(("box", "circle", "line", "lseg", "path", "polygon"), "geometric"),
}
MARIADB_TYPES = {
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


class Columns(NamedTuple):
    types: dict[str, str]  # column -> mapping type
    key: tuple[str, ...]  # the primary key's columns in key order
    filled: frozenset[str]
    millis: frozenset[str]  # timestamp columns Debezium counts in milliseconds (TableMapping.millis)
    decimals: dict[str, tuple[int, int]]  # (precision, scale) of decimals a DECIMAL(38) holds (TableMapping.decimals)
    widths: dict[str, int]  # bit(n) columns' n (TableMapping.widths)
    unlogged: frozenset[str]  # generated columns: left out of every store (TableMapping.unlogged)


def columns(source: SourceConfig, table: TableRef) -> Columns:
    """A table's columns, their mapping types and its primary key, from the source's catalog.

    Filled: columns with a value of their own in a row nobody wrote them in
    (a non-null DEFAULT): added to a table, they fill its existing rows
    without a change event (``sync.backfill``). Generated columns are neither
    typed nor filled: no store keeps them (``TableMapping.unlogged``).
    """
    if source.kind == "postgres":
        with connect_postgres(source) as conn:
            # A composite type's column is USER-DEFINED, as an enum's is: pg_type tells them apart.
            rows = conn.execute(
                "SELECT column_name, CASE WHEN data_type = 'USER-DEFINED' AND (SELECT t.typtype FROM pg_type t"
                " JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = udt_schema AND t.typname ="
                " udt_name) = 'c' THEN 'composite' ELSE data_type END,"
                " column_default IS NOT NULL, character_maximum_length, is_generated = 'ALWAYS'"
                " FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                (table.namespace, table.table),
            ).fetchall()
            key = conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
                " ORDER BY array_position(i.indkey, a.attnum)",
                (f'"{table.namespace}"."{table.table}"',),
            ).fetchall()
        unlogged = frozenset(row[0] for row in rows if row[4])
        rows = [row for row in rows if not row[4]]
        types = {name: POSTGRES_TYPES.get(kind, "text") for name, kind, *_ in rows}
        filled = frozenset(name for name, _, has_value, *_ in rows if has_value)
        widths = {name: length for name, kind, _, length, _ in rows if kind == "bit" and length}
        millis: frozenset[str] = frozenset()
        decimals: dict[str, tuple[int, int]] = {}  # a Postgres numeric, even numeric(p,s), may hold NaN
    else:
        conn = connect_mariadb(source)
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
    if not rows and not unlogged:
        raise FatalError(f"source {source.name}: table {table} not found while reading its columns")
    return Columns(types, tuple(k[0] for k in key), filled, millis, decimals, widths, unlogged)


def _fixed_decimal(data_type: str, column_type: str, precision: int | None) -> bool:
    """A MariaDB DECIMAL(p,s) or BIGINT UNSIGNED (20 digits) that a DECIMAL of at most 38 digits holds."""
    is_decimal = data_type.lower() == "decimal" or _mariadb_type(data_type, column_type) == "decimal"
    return is_decimal and precision is not None and precision <= 38


def _mariadb_type(data_type: str, column_type: str) -> str:
    # BIGINT UNSIGNED reaches 2^64 - 1, past a signed 64-bit integer: Debezium sends it as a decimal
    # (bigint.unsigned.handling.mode=precise), and every store keeps it as one.
    if data_type.lower() == "bigint" and "unsigned" in column_type.lower():
        return "decimal"
    return MARIADB_TYPES.get(data_type.lower(), "text")


def mappings_for(config: Config, follower: FollowerConfig) -> dict[str, TableMapping]:
    """The follower's mapping per Debezium topic."""
    result: dict[str, TableMapping] = {}
    targets: dict[str, str] = {}
    for source, table in config.followed_tables(follower):
        mapping = table_mapping(source, table, follower)
        if mapping.target in targets:
            raise FatalError(
                f"follower {follower.name}: {targets[mapping.target]} and {source.name}.{table} both map to "
                f"{mapping.target!r}; set mappings.'{source.name}.{table}'.target (or mappings.'<namespace>.<table>'"
                ".target) for one of them"
            )
        targets[mapping.target] = f"{source.name}.{table}"
        result[source.topic(table)] = mapping
    return result


def table_mapping(source: SourceConfig, table: TableRef, follower: FollowerConfig) -> TableMapping:
    """One table's mapping: its columns and key from the catalog as they are now, with the follower's overrides."""
    override = follower.mapping_for(source.name, table)
    types, key_columns, filled, millis, decimals, widths, unlogged = columns(source, table)
    if override:
        types.update(override.types)
    return TableMapping(
        table=str(table),
        target=override.target if override and override.target else default_target(table.table),
        key_columns=key_columns,
        include=tuple(override.include) if override and override.include is not None else None,
        rename=dict(override.rename) if override else {},
        types=types,
        filled=filled,
        unlogged=unlogged - frozenset(types),
        millis=millis,
        decimals={c: d for c, d in decimals.items() if types.get(c) == "decimal"},
        widths={c: n for c, n in widths.items() if types.get(c) == "bits"},
    )


def learner(config: Config, follower: FollowerConfig) -> Callable[[str], TableMapping]:
    """``topic -> its table's mapping read anew``: how a follower learns a shape that changed while it runs."""
    tables = {source.topic(table): (source, table) for source, table in config.followed_tables(follower)}

    def learn(topic: str) -> TableMapping:
        source, table = tables[topic]
        return table_mapping(source, table, follower)

    return learn


def source_rows(source: SourceConfig, table: TableRef, where: str | None = None) -> Iterator[dict[str, Any]]:
    """Every row of a source table (those matching SQL ``where``, if given), as the database driver returns it."""
    condition = f" WHERE {where}" if where else ""
    selected = _every_column(source, table)
    if source.kind == "postgres":
        with reading(source) as conn:
            with conn.cursor(row_factory=dict_row, name="cdcsync_verify") as cur:
                cur.itersize = PAGE_ROWS  # rows a round trip (psycopg's default, 100, made 10,000 per million)
                cur.execute(f'SELECT {selected} FROM "{table.namespace}"."{table.table}"{condition}')
                yield from cur
    else:
        conn = connect_mariadb(source)
        with conn, conn.cursor(pymysql.cursors.SSDictCursor) as cur:
            cur.execute(f"SELECT {selected} FROM `{table.namespace}`.`{table.table}`{condition}")
            for row in cur:
                yield dict(row)


def _every_column(source: SourceConfig, table: TableRef) -> str:
    """The select list of every column the log carries: ``*``, and on MariaDB its INVISIBLE columns, which
    ``*`` leaves out and the binlog carries."""
    if source.kind == "postgres":
        return "*"
    hidden = fetch(
        source,
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
        " AND extra LIKE '%%INVISIBLE%%' ORDER BY ordinal_position",
        (table.namespace, table.table),
    )
    return ", ".join(["*", *("`" + str(c).replace("`", "``") + "`" for (c,) in hidden)])


def source_pages(
    source: SourceConfig, table: TableRef, key: Sequence[str], page_rows: int = PAGE_ROWS
) -> Iterator[dict[str, Any]]:
    """Every row of a source table in key order, ``page_rows`` rows a query, each query its own transaction.

    For a pass that runs for hours at a slow pace (the daemon's background
    verify): one cursor open that long would hold Postgres's oldest snapshot
    back (vacuum could not clean behind it) or keep a MariaDB transaction
    open. Each page starts after the last key of the one before; a row
    changed between two pages is seen as it is when its page is read.
    """
    quote = '"' if source.kind == "postgres" else "`"
    names = [quote + column.replace(quote, quote * 2) + quote for column in key]
    left = f"({', '.join(names)})"
    name = f"{quote}{table.namespace}{quote}.{quote}{table.table}{quote}"
    after: tuple[Any, ...] | None = None
    selected = _every_column(source, table)
    while True:
        where = "" if after is None else f" WHERE {left} > ({', '.join(['%s'] * len(key))})"
        query = f"SELECT {selected} FROM {name}{where} ORDER BY {', '.join(names)} LIMIT {int(page_rows)}"
        rows = _fetch_rows(source, query, after)
        yield from rows
        if len(rows) < page_rows:
            return
        after = tuple(rows[-1][column] for column in key)


def _fetch_rows(source: SourceConfig, query: str, params: tuple[Any, ...] | None) -> list[dict[str, Any]]:
    if source.kind == "postgres":
        with reading(source) as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            return cur.fetchall()
    conn = connect_mariadb(source)
    with conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(query, params)
        return [dict(row) for row in cur.fetchall()]


def table_bytes(source: SourceConfig, table: TableRef) -> int:
    """The bytes a source table takes on disk, its partitions' with it (0 when the catalog cannot tell)."""
    if source.kind == "postgres":
        with connect_postgres(source) as conn:
            found = conn.execute(
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(r) WHERE isleaf),"
                " pg_total_relation_size(r)) FROM to_regclass(%s) r",  # a partitioned table: its partitions' bytes
                (".".join('"' + name.replace('"', '""') + '"' for name in (table.namespace, table.table)),),
            ).fetchone()
        return int(found[0] or 0) if found else 0
    conn = connect_mariadb(source)
    with conn, conn.cursor() as cur:
        cur.execute(
            "SELECT data_length + index_length FROM information_schema.tables WHERE table_schema = %s"
            " AND table_name = %s",
            (table.namespace, table.table),
        )
        found = cur.fetchone()
    return int(found[0] or 0) if found else 0
