"""Range checksums: a warehouse table compared with its Postgres table where each side is stored.

``verify``'s row-by-row path digests every row in Python on both sides
(~37 us of CPU a row against the warehouse, docs/performance.md). Where a
table's every column has a form that Postgres and Spark SQL can both write
byte for byte, each side instead sums a hash of each row's text per range of
keys, in the database and on Spark's executors, and only the ranges whose
sums differ are read row by row (data-diff's method, one level deep).

A row's text is its key, then each field in field-name order, each as
``<bytes>:<text>`` (text) or ``<text>,`` (any other value), or ``~`` for a
null: no two rows have the same text. Its
hash is MD5 (both engines have it); a range's sum is its row count and the
sums of two 60-bit slices of its rows' hashes, exact on both sides (Postgres
``numeric``, Spark ``DECIMAL(38,0)``). A row that differs changes its range's
sums unless two 60-bit sums collide.

Which tables (``plan``): a Postgres source with UTF-8 text; one key column
of an integer type; every mapped column of a type in ``FORMS`` with the
kind the mapping and the warehouse give it; and the warehouse's columns
exactly the mapping's fields. A value whose two texts can differ though
both stores hold it alike (an infinite timestamp: Postgres' ``infinity``,
the warehouse's far microseconds) makes its range differ, and the row path
then compares it as it always has: a false difference costs time, never a
wrong answer. Any other table takes the row path.

The ranges: of equal width between the source's smallest and largest key,
one per ``RANGE_ROWS`` rows the catalog estimates (``BUCKETS`` at least,
``MOST_BUCKETS`` at most), the first and last open-ended (a key outside
them, written since, lands there). Small ranges keep what a scattered
divergence sends row by row small: 1,000 stale rows of 10M, ~500k rows.
Where the differing ranges hold more than ``ROW_PATH_SHARE`` of the table,
the whole table is compared row by row instead, its source side in a
process of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdcsync.config import SourceConfig, TableRef
from cdcsync.db import connect_postgres
from cdcsync.sync.mapping import TableMapping

RANGE_ROWS = 500  # rows a range, by the catalog's estimate
BUCKETS, MOST_BUCKETS = 4096, 65536  # ranges of a table, at least and at most
ROW_PATH_SHARE = 0.25  # differing ranges holding more of the table: the whole table is read row by row
RUNS = 200  # runs of differing ranges a source query names by key; more: by range number (a scan of the table)
Sums = dict[int, tuple[int, int, int]]  # range -> (rows, sum of hash slice 1, sum of hash slice 2)

# Postgres type -> the kind the mapping gives it and a row text's piece for a non-null value in each engine
# ({c}: the column, quoted for the engine). The pieces must match byte for byte for equal stored values.
FORMS: dict[str, tuple[str, str, str]] = {
    **dict.fromkeys(("smallint", "integer", "bigint"), ("int", "{c}::text", "CAST({c} AS STRING)")),
    "text": ("text", "{c}", "{c}"),
    "character varying": ("text", "{c}::text", "{c}"),
    "boolean": ("bool", "{c}::text", "CAST({c} AS STRING)"),
    "uuid": ("uuid", "{c}::text", "{c}"),
    # microseconds since 1970 (the warehouse's TIMESTAMP is UTC; a timestamp without zone is read as UTC)
    **dict.fromkeys(
        ("timestamp with time zone", "timestamp without time zone"),
        (
            "timestamp",
            "CASE WHEN isfinite({c}) THEN (extract(epoch FROM {c}) * 1000000)::bigint::text ELSE {c}::text END",
            "CAST(unix_micros({c}) AS STRING)",
        ),
    ),
    "date": (
        "date",
        "CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01')::text ELSE {c}::text END",
        "CAST(unix_date({c}) AS STRING)",
    ),
}
KEY_TYPES = frozenset(("smallint", "integer", "bigint"))


@dataclass(frozen=True)
class Plan:
    """One table's range checksums: the SQL of each side and the ranges' bounds."""

    key: str  # the source's key column
    low: int  # the source's smallest key when planned
    width: int  # keys a range
    buckets: int
    source_text: str  # a row's text, Postgres SQL over the table's columns
    store_text: str  # the same, Spark SQL over the warehouse table's columns

    def source_bucket(self) -> str:
        return self._bucket(f"{_pg(self.key)}::bigint", "/")

    def store_bucket(self) -> str:
        return f"coalesce({self._bucket('try_cast(_cdcsync_id AS BIGINT)', 'div')}, 0)"

    def _bucket(self, key: str, div: str) -> str:
        high = self.low + self.width * self.buckets - 1
        return f"((least(greatest({key}, {self.low}), {high}) - {self.low}) {div} {self.width})"

    def source_where(self, ranges: list[int]) -> str:
        """Postgres SQL: the rows of these ranges, by key where they are few runs (the key's index serves it),
        else by range number."""
        runs = _runs(sorted(ranges))
        if len(runs) > RUNS:
            return f"{self.source_bucket()} = ANY('{{{','.join(str(r) for r in sorted(ranges))}}}'::bigint[])"
        parts = []
        for first, last in runs:
            start = f"{_pg(self.key)} >= {self.low + first * self.width}" if first else ""
            end = f"{_pg(self.key)} < {self.low + (last + 1) * self.width}" if last < self.buckets - 1 else ""
            parts.append(" AND ".join(p for p in (start, end) if p) or "true")
        return " OR ".join(f"({p})" for p in parts)

    def store_where(self, ranges: list[int]) -> str:
        """Spark SQL: the warehouse rows of these ranges."""
        return f"{self.store_bucket()} IN ({', '.join(str(r) for r in sorted(ranges))})"


def plan(source: SourceConfig, table: TableRef, mapping: TableMapping, kinds: Mapping[str, str | None]) -> Plan | None:
    """The table's range checksums, or None where it takes the row path (the module docstring says which).

    ``kinds``: the warehouse table's data columns and their kinds.
    """
    if source.kind != "postgres" or len(mapping.key_columns) != 1 or mapping.plain_key is None or mapping.untyped:
        return None
    fields = mapping.fields()  # column -> (field, kind)
    if set(kinds) != {name for name, _ in fields.values()}:
        return None
    with connect_postgres(source) as conn:
        if conn.execute("SHOW server_encoding").fetchone() != ("UTF8",):
            return None
        types: dict[str, str] = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            ).fetchall()
        )
        key = mapping.key_columns[0]
        if types.get(key) not in KEY_TYPES:
            return None
        source_parts, store_parts = [], []
        for column, (name, kind) in sorted(fields.items(), key=lambda item: item[1][0]):
            form = FORMS.get(types.get(column, ""))
            if form is None or form[0] != kind or kinds[name] != kind:
                return None
            source_parts.append(_piece(form[1].format(c=_pg(column)), "pg", kind == "text"))
            store_parts.append(_piece(form[2].format(c=_spark(name)), "spark", kind == "text"))
        found = conn.execute(f"SELECT min({_pg(key)}), max({_pg(key)}) FROM {_pg_table(table)}").fetchone()
        estimated = conn.execute(  # a partitioned table: its partitions' (a plain table is its own one leaf)
            "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0) FROM pg_partition_tree(to_regclass(%s)) t"
            " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
            (_pg_table(table),),
        ).fetchone()
    low, high = (found[0], found[1]) if found and found[0] is not None else (0, 0)
    wanted = int(estimated[0] if estimated else 0) // RANGE_ROWS
    buckets = min(max(BUCKETS, wanted), MOST_BUCKETS, high - low + 1)
    width = -(-(high - low + 1) // buckets)
    if low - width < -(2**62) or low + width * buckets > 2**62:  # the bucket arithmetic stays inside bigint
        return None
    return Plan(
        key,
        low,
        width,
        buckets,
        " || ".join([_piece(f"{_pg(key)}::text", "pg", False), *source_parts]),
        "concat(" + ", ".join([_piece("_cdcsync_id", "spark", False), *store_parts]) + ")",
    )


def source_sums(source: SourceConfig, table: TableRef, plan: Plan) -> Sums:
    """Each range's row count and hash sums in the Postgres table, in one statement (one snapshot)."""
    query = (
        f"SELECT b, count(*), sum(('x' || substr(h, 1, 15))::bit(60)::bigint),"
        f" sum(('x' || substr(h, 16, 15))::bit(60)::bigint)"
        f" FROM (SELECT {plan.source_bucket()} AS b, md5({plan.source_text}) AS h FROM {_pg_table(table)}) r"
        f" GROUP BY b"
    )
    with connect_postgres(source) as conn:
        return {int(b): (int(n), int(s1), int(s2)) for b, n, s1, s2 in conn.execute(query).fetchall()}


def store_sums_sql(plan: Plan) -> tuple[str, str, list[str]]:
    """Spark SQL of the warehouse's side: the range, the hash, and the aggregates over them (``b``, ``h``)."""
    slices = [f"sum(CAST(conv(substr(h, {start}, 15), 16, 10) AS DECIMAL(38, 0)))" for start in (1, 16)]
    return plan.store_bucket(), f"md5(CAST({plan.store_text} AS BINARY))", ["count(*)", *slices]


def differing(there: Sums, held: Sums) -> list[int]:
    """The ranges whose rows or sums differ between the two sides."""
    return sorted(b for b in there.keys() | held.keys() if there.get(b) != held.get(b))


def mostly(there: Sums, held: Sums, ranges: list[int]) -> bool:
    """Whether ``ranges`` hold more than ``ROW_PATH_SHARE`` of the table's rows on either side."""
    chosen = set(ranges)
    return any(
        sum(n for _, (n, _, _) in sums.items()) - rows_of(sums, chosen)
        > ROW_PATH_SHARE * sum(n for n, _, _ in sums.values())
        for sums in (there, held)
    )


def rows_of(sums: Sums, ranges: set[int]) -> int:
    """The rows of a side outside ``ranges``: found alike on both sides, never read one by one."""
    return sum(n for b, (n, _, _) in sums.items() if b not in ranges)


def _piece(text: str, dialect: str, free: bool) -> str:
    """A field's part of a row's text, ``~`` for a null (no value starts with it).

    ``free``: text that may hold any character, written ``<bytes>:<text>``; any other value (digits, ``true``,
    a UUID, ``infinity``) holds no ``,`` and is written ``<text>,``, its SQL evaluated once.
    """
    if dialect == "pg" and free:
        return f"coalesce(octet_length({text})::text || ':' || {text}, '~')"
    if dialect == "pg":
        return f"coalesce({text} || ',', '~')"
    if free:
        return f"coalesce(concat(CAST(octet_length({text}) AS STRING), ':', {text}), '~')"
    return f"coalesce(concat({text}, ','), '~')"


def _runs(ranges: list[int]) -> list[tuple[int, int]]:
    """Sorted range numbers as runs of consecutive ones: ``[1, 2, 3, 7]`` -> ``[(1, 3), (7, 7)]``."""
    runs: list[tuple[int, int]] = []
    for r in ranges:
        if runs and runs[-1][1] == r - 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


def _pg(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _pg_table(table: TableRef) -> str:
    return f"{_pg(table.namespace)}.{_pg(table.table)}"


def _spark(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def summed(rows: list[Any]) -> Sums:
    """Spark's aggregated rows ``(range, rows, sum 1, sum 2)`` as ``Sums``."""
    return {int(b): (int(n), int(s1), int(s2)) for b, n, s1, s2 in rows}
