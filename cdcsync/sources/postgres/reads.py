"""Reads from Postgres: its catalog, rows (through ``reading``'s loaders), a table's bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from psycopg.rows import dict_row

from cdcsync.sources.base import SourceSettings, TableName
from cdcsync.sources.postgres.connection import connect
from cdcsync.sources.postgres.loaders import reading
from cdcsync.sources.postgres.snapshot import PostgresRead
from cdcsync.sources.reads import PAGE_ROWS, Columns, Reads

TYPES = {
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


class PostgresReads(Reads):
    jdbc_driver = "org.postgresql.Driver"
    # A point is JDBC OTHER, which Spark cannot read: as text, "(x,y)" (sync.mapping reads it); a date as text
    # too: a year past 9999 has no Python date, nor 'infinity' (sync.far_time).
    jdbc_text_kinds = frozenset({"point", "pg_text", "geometric", "date", "bits"})

    # Debezium sends a numeric[] holding NaN or an infinity as null, and a date before year 1 read by its initial
    # snapshot in the wrong era (docs/types.md, "Values read again from the source").
    reselects = True

    def reselected_arrays(self, source: SourceSettings, table: TableName) -> frozenset[str]:
        with connect(source, autocommit=True) as conn:
            found = conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
                " AND data_type = 'ARRAY' AND udt_name = '_numeric'",
                (table.namespace, table.table),
            ).fetchall()
        return frozenset(str(name) for (name,) in found)

    def snapshot_dates_wrong(self, dates: list[str]) -> str | None:
        return " OR ".join('"' + c.replace('"', '""') + "\" < '0001-01-01'" for c in dates) or None

    def jdbc_url(self, source: SourceSettings) -> str:
        return f"jdbc:postgresql://{source.host}:{source.port}/{source.database}"

    def hash_bucket(self, quoted_keys: list[str]) -> str:
        joined = ", ".join(f"{k}::text" for k in quoted_keys)
        return f"(hashtext(concat_ws('|', {joined})) & 2147483647)"

    def snapshot(self, source: SourceSettings) -> PostgresRead:
        return PostgresRead(source)

    def columns(self, source: SourceSettings, table: TableName) -> Columns:
        with connect(source) as conn:
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
        types = {name: TYPES.get(kind, "text") for name, kind, *_ in rows}
        filled = frozenset(name for name, _, has_value, *_ in rows if has_value)
        widths = {name: length for name, kind, _, length, _ in rows if kind == "bit" and length}
        millis: frozenset[str] = frozenset()
        decimals: dict[str, tuple[int, int]] = {}  # a Postgres numeric, even numeric(p,s), may hold NaN
        return Columns(types, tuple(k[0] for k in key), filled, millis, decimals, widths, unlogged)

    def every_column(self, source: SourceSettings, table: TableName) -> str:
        return "*"

    def stream(self, source: SourceSettings, query: str) -> Iterator[dict[str, Any]]:
        with reading(source) as conn:
            with conn.cursor(row_factory=dict_row, name="cdcsync_verify") as cur:
                cur.itersize = PAGE_ROWS  # rows a round trip (psycopg's default, 100, made 10,000 per million)
                cur.execute(query)  # type: ignore[arg-type]
                yield from cur

    def page(self, source: SourceSettings, query: str, params: tuple[Any, ...] | None) -> list[dict[str, Any]]:
        with reading(source) as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall()

    def table_bytes(self, source: SourceSettings, table: TableName) -> int:
        with connect(source) as conn:
            found = conn.execute(
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(r) WHERE isleaf),"
                " pg_total_relation_size(r)) FROM to_regclass(%s) r",  # a partitioned table: its partitions' bytes
                (".".join('"' + name.replace('"', '""') + '"' for name in (table.namespace, table.table)),),
            ).fetchone()
        return int(found[0] or 0) if found else 0
