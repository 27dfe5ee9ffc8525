"""Postgres' side of range checksums: its text forms, and sums in ``numeric``."""

from __future__ import annotations

from typing import ClassVar

from cdcsync.sources.base import SourceSettings, TableName
from cdcsync.sources.checksums import Catalog, Checksums
from cdcsync.sources.postgres.connection import connect


class PostgresChecksums(Checksums):
    forms: ClassVar[dict[tuple[str, str], str]] = {
        **{(t, "int"): "{c}::text" for t in ("smallint", "integer", "bigint")},
        ("text", "text"): "{c}",
        ("character varying", "text"): "{c}::text",
        ("boolean", "bool"): "{c}::text",
        ("uuid", "uuid"): "{c}::text",
        **{
            (t, "timestamp"): "CASE WHEN isfinite({c}) THEN (extract(epoch FROM {c}) * 1000000)::bigint::text"
            " ELSE {c}::text END"
            for t in ("timestamp with time zone", "timestamp without time zone")
        },
        ("date", "date"): "CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01')::text ELSE {c}::text END",
    }
    pieces = ("coalesce(octet_length({t})::text || ':' || {t}, '~')", "coalesce({t} || ',', '~')")
    key_types = frozenset(("smallint", "integer", "bigint"))

    def as_bigint(self, key: str) -> str:
        return f"{key}::bigint"

    def integer_division(self) -> str:
        return "/"

    def one_of(self, expression: str, numbers: str) -> str:
        return f"{expression} = ANY('{{{numbers}}}'::bigint[])"

    def concat(self, parts: list[str]) -> str:
        return " || ".join(parts)

    def catalog(self, source: SourceSettings, table: TableName, key: str) -> Catalog | None:
        name = ".".join('"' + part.replace('"', '""') + '"' for part in (table.namespace, table.table))
        with connect(source) as conn:
            if conn.execute("SHOW server_encoding").fetchone() != ("UTF8",):
                return None
            types = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            ).fetchall()
            column = '"' + key.replace('"', '""') + '"'
            low, high = conn.execute(f"SELECT min({column}), max({column}) FROM {name}").fetchone() or (None, None)
            estimated = conn.execute(  # a partitioned table: its partitions' (a plain table is its own one leaf)
                "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0) FROM pg_partition_tree(to_regclass(%s)) t"
                " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
                (name,),
            ).fetchone()
            if not estimated or not estimated[0]:  # never analyzed (-1): counted, from the key's index
                estimated = conn.execute(f"SELECT count(*) FROM {name}").fetchone()
        if low is None or high is None:
            low = high = 0
        found = {str(c): str(kind).lower() for c, kind in types}
        return found, int(low), int(high), int(estimated[0] or 0) if estimated else 0

    def sums_query(self, bucket: str, text: str, table: str) -> str:
        return (
            f"SELECT b, count(*), sum(('x' || substr(h, 1, 15))::bit(60)::bigint),"
            f" sum(('x' || substr(h, 16, 15))::bit(60)::bigint)"
            f" FROM (SELECT {bucket} AS b, md5({text}) AS h FROM {table}) r GROUP BY b"
        )
