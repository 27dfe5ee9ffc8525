"""Range checksums: a warehouse table compared with its source table where each side is stored.

``verify``'s row-by-row path digests every row in Python on both sides
(~37 us of CPU a row against the warehouse, docs/performance.md). Where a
table's every column has a form that the source database and Spark SQL can
both write byte for byte, each side instead sums a hash of each row's text
per range of keys, in the database and on Spark's executors, and only the
ranges whose sums differ are read row by row (data-diff's method, one level
deep).

A row's text is its key, then each field in field-name order, each as
``<bytes>:<text>`` (text) or ``<text>,`` (any other value), or ``~`` for a
null: no two rows have the same text. Its hash is MD5 (every engine has
it); a range's sum is its row count and the sums of two 60-bit slices of
its rows' hashes, exact on each side (Postgres ``numeric``, MariaDB
``DECIMAL``, Spark ``DECIMAL(38,0)``). A row that differs changes its
range's sums unless two 60-bit sums collide.

Which tables (``plan``): a Postgres source with UTF-8 text, or a MariaDB
one; one key column of an integer type; every mapped column of a data type
and kind in ``POSTGRES_FORMS`` or ``MARIADB_FORMS``, the warehouse giving
it the same kind; and the warehouse's columns exactly the mapping's fields.
A value whose two texts can differ though both stores hold it alike (an
infinite timestamp: Postgres' ``infinity``, the warehouse's far
microseconds) makes its range differ, and the row path then compares it as
it always has: a false difference costs time, never a wrong answer. Any
other table takes the row path.

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
from cdcsync.db import connect_mariadb, connect_postgres
from cdcsync.sync.mapping import TableMapping

RANGE_ROWS = 500  # rows a range, by the catalog's estimate
BUCKETS, MOST_BUCKETS = 4096, 65536  # ranges of a table, at least and at most
ROW_PATH_SHARE = 0.25  # differing ranges holding more of the table: the whole table is read row by row
RUNS = 200  # runs of differing ranges a source query names by key; more: by range number (a scan of the table)
Sums = dict[int, tuple[int, int, int]]  # range -> (rows, sum of hash slice 1, sum of hash slice 2)

# A row text's piece for a non-null value ({c}: the column, quoted for the engine), by the source's data type
# and the kind the mapping gives the column; and the warehouse's, by that kind. Equal stored values must give
# the same bytes on both sides. Timestamps are microseconds since 1970 (the warehouse's TIMESTAMP is UTC; a
# timestamp without zone is read as UTC), dates days since 1970.
POSTGRES_FORMS: dict[tuple[str, str], str] = {
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
# MariaDB: no TIMESTAMP (read in the session's time zone) and no BIGINT UNSIGNED (a decimal kind). A date
# MariaDB cannot count from 1970 (the zero date) is written as its text, which no warehouse value matches.
MARIADB_FORMS: dict[tuple[str, str], str] = {
    **{(t, "int"): "CAST({c} AS CHAR)" for t in ("tinyint", "smallint", "mediumint", "int", "bigint", "year")},
    ("tinyint", "bool"): "CASE WHEN {c} <> 0 THEN 'true' WHEN {c} = 0 THEN 'false' END",  # a null stays null
    **{(t, "text"): "CONVERT({c} USING utf8mb4)" for t in ("char", "varchar", "tinytext", "text", "mediumtext")},
    ("longtext", "text"): "CONVERT({c} USING utf8mb4)",
    ("datetime", "timestamp"): "COALESCE(CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {c}) AS CHAR),"
    " CONCAT('?', CAST({c} AS CHAR)))",
    ("date", "date"): "COALESCE(CAST(DATEDIFF({c}, '1970-01-01') AS CHAR), CONCAT('?', CAST({c} AS CHAR)))",
}
# A field's piece in each dialect: (text that may hold anything, any other value); {t}: the value's text.
PIECES = {
    "postgres": ("coalesce(octet_length({t})::text || ':' || {t}, '~')", "coalesce({t} || ',', '~')"),
    "mariadb": ("COALESCE(CONCAT(OCTET_LENGTH({t}), ':', {t}), '~')", "COALESCE(CONCAT({t}, ','), '~')"),
    "spark": ("coalesce(concat(CAST(octet_length({t}) AS STRING), ':', {t}), '~')", "coalesce(concat({t}, ','), '~')"),
}
SPARK_FORMS: dict[str, str] = {
    "int": "CAST({c} AS STRING)",
    "text": "{c}",
    "uuid": "{c}",
    "bool": "CAST({c} AS STRING)",
    "timestamp": "CAST(unix_micros({c}) AS STRING)",
    "date": "CAST(unix_date({c}) AS STRING)",
}
KEY_TYPES = {
    "postgres": frozenset(("smallint", "integer", "bigint")),
    "mariadb": frozenset(("tinyint", "smallint", "mediumint", "int", "bigint")),
}


@dataclass(frozen=True)
class Plan:
    """One table's range checksums: the SQL of each side and the ranges' bounds."""

    dialect: str  # the source's kind: postgres, mariadb
    key: str  # the source's key column
    low: int  # the source's smallest key when planned
    width: int  # keys a range
    buckets: int
    source_text: str  # a row's text, the source's SQL over the table's columns
    store_text: str  # the same, Spark SQL over the warehouse table's columns

    def source_bucket(self) -> str:
        key = _quoted(self.key, self.dialect)
        if self.dialect == "postgres":
            return self._bucket(f"{key}::bigint", "/")
        return self._bucket(f"CAST({key} AS SIGNED)", "DIV")

    def store_bucket(self) -> str:
        return f"coalesce({self._bucket('try_cast(_cdcsync_id AS BIGINT)', 'div')}, 0)"

    def _bucket(self, key: str, div: str) -> str:
        high = self.low + self.width * self.buckets - 1
        return f"((least(greatest({key}, {self.low}), {high}) - {self.low}) {div} {self.width})"

    def source_where(self, ranges: list[int]) -> str:
        """The source's SQL: the rows of these ranges, by key where they are few runs (the key's index serves
        it), else by range number."""
        runs = _runs(sorted(ranges))
        if len(runs) > RUNS:
            numbers = ",".join(str(r) for r in sorted(ranges))
            if self.dialect == "postgres":
                return f"{self.source_bucket()} = ANY('{{{numbers}}}'::bigint[])"
            return f"{self.source_bucket()} IN ({numbers})"
        key = _quoted(self.key, self.dialect)
        parts = []
        for first, last in runs:
            start = f"{key} >= {self.low + first * self.width}" if first else ""
            end = f"{key} < {self.low + (last + 1) * self.width}" if last < self.buckets - 1 else ""
            parts.append(" AND ".join(p for p in (start, end) if p) or "true")
        return " OR ".join(f"({p})" for p in parts)

    def store_where(self, ranges: list[int]) -> str:
        """Spark SQL: the warehouse rows of these ranges."""
        return f"{self.store_bucket()} IN ({', '.join(str(r) for r in sorted(ranges))})"


def plan(source: SourceConfig, table: TableRef, mapping: TableMapping, kinds: Mapping[str, str | None]) -> Plan | None:
    """The table's range checksums, or None where it takes the row path (the module docstring says which).

    ``kinds``: the warehouse table's data columns and their kinds.
    """
    if len(mapping.key_columns) != 1 or mapping.plain_key is None or mapping.untyped:
        return None
    if mapping.types.get(mapping.key_columns[0]) != "int":  # its id the integer's digits (not a bool's, a decimal's)
        return None
    fields = mapping.fields()  # column -> (field, kind)
    if set(kinds) != {name for name, _ in fields.values()}:
        return None
    catalog = _catalog(source, table, mapping.key_columns[0])
    if catalog is None:
        return None
    types, low, high, estimated = catalog
    dialect, key = source.kind, mapping.key_columns[0]
    forms = POSTGRES_FORMS if dialect == "postgres" else MARIADB_FORMS
    if types.get(key) not in KEY_TYPES[dialect]:
        return None
    source_parts, store_parts = [_piece(_quoted(key, dialect), dialect, False)], [_piece("_cdcsync_id", "spark", False)]
    for column, (name, kind) in sorted(fields.items(), key=lambda item: item[1][0]):
        form = forms.get((types.get(column, ""), kind or ""))
        if form is None or kinds[name] != kind:
            return None
        source_parts.append(_piece(form.format(c=_quoted(column, dialect)), dialect, kind == "text"))
        store_parts.append(_piece(SPARK_FORMS[str(kind)].format(c=_spark(name)), "spark", kind == "text"))
    buckets = min(max(BUCKETS, estimated // RANGE_ROWS), MOST_BUCKETS, high - low + 1)
    width = -(-(high - low + 1) // buckets)
    if low - width < -(2**62) or low + width * buckets > 2**62:  # the bucket arithmetic stays inside bigint
        return None
    text = " || ".join(source_parts) if dialect == "postgres" else f"CONCAT({', '.join(source_parts)})"
    return Plan(dialect, key, low, width, buckets, text, f"concat({', '.join(store_parts)})")


def _catalog(source: SourceConfig, table: TableRef, key: str) -> tuple[dict[str, str], int, int, int] | None:
    """The table's columns' data types, its smallest and largest key, and its rows by the catalog's estimate;
    None where its text is not UTF-8 (Postgres)."""
    name = _table(table, source.kind)
    if source.kind == "postgres":
        with connect_postgres(source) as conn:
            if conn.execute("SHOW server_encoding").fetchone() != ("UTF8",):
                return None
            types = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            ).fetchall()
            column = _quoted(key, "postgres")
            low, high = conn.execute(f"SELECT min({column}), max({column}) FROM {name}").fetchone() or (None, None)
            estimated = conn.execute(  # a partitioned table: its partitions' (a plain table is its own one leaf)
                "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0) FROM pg_partition_tree(to_regclass(%s)) t"
                " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
                (name,),
            ).fetchone()
            if not estimated or not estimated[0]:  # never analyzed (-1): counted, from the key's index
                estimated = conn.execute(f"SELECT count(*) FROM {name}").fetchone()
    else:
        conn = connect_mariadb(source)
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            )
            types = list(cur.fetchall())
            cur.execute(f"SELECT MIN({_quoted(key, 'mariadb')}), MAX({_quoted(key, 'mariadb')}) FROM {name}")
            low, high = cur.fetchone() or (None, None)
            cur.execute(
                "SELECT table_rows FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            )
            estimated = cur.fetchone()
    found = {str(column): str(kind).lower() for column, kind in types}
    if low is None or high is None:
        low = high = 0
    return found, int(low), int(high), int(estimated[0] or 0) if estimated else 0


def source_sums(source: SourceConfig, table: TableRef, plan: Plan) -> Sums:
    """Each range's row count and hash sums in the source table, in one statement (one snapshot)."""
    name = _table(table, plan.dialect)
    if plan.dialect == "postgres":
        query = (
            f"SELECT b, count(*), sum(('x' || substr(h, 1, 15))::bit(60)::bigint),"
            f" sum(('x' || substr(h, 16, 15))::bit(60)::bigint)"
            f" FROM (SELECT {plan.source_bucket()} AS b, md5({plan.source_text}) AS h FROM {name}) r GROUP BY b"
        )
        with connect_postgres(source) as conn:
            rows = conn.execute(query).fetchall()
    else:
        query = (
            f"SELECT b, COUNT(*), SUM(CAST(CONV(SUBSTR(h, 1, 15), 16, 10) AS UNSIGNED)),"
            f" SUM(CAST(CONV(SUBSTR(h, 16, 15), 16, 10) AS UNSIGNED))"
            f" FROM (SELECT {plan.source_bucket()} AS b, MD5(CONVERT({plan.source_text} USING utf8mb4)) AS h"
            f" FROM {name}) r GROUP BY b"
        )
        conn = connect_mariadb(source)
        with conn, conn.cursor() as cur:
            cur.execute(query)
            rows = list(cur.fetchall())
    return {int(b): (int(n), int(s1), int(s2)) for b, n, s1, s2 in rows}


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
    free_form, plain_form = PIECES[dialect]
    return (free_form if free else plain_form).format(t=text)


def _runs(ranges: list[int]) -> list[tuple[int, int]]:
    """Sorted range numbers as runs of consecutive ones: ``[1, 2, 3, 7]`` -> ``[(1, 3), (7, 7)]``."""
    runs: list[tuple[int, int]] = []
    for r in ranges:
        if runs and runs[-1][1] == r - 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


def _quoted(name: str, dialect: str) -> str:
    quote = '"' if dialect == "postgres" else "`"
    return quote + name.replace(quote, quote * 2) + quote


def _table(table: TableRef, dialect: str) -> str:
    return f"{_quoted(table.namespace, dialect)}.{_quoted(table.table, dialect)}"


def _spark(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def summed(rows: list[Any]) -> Sums:
    """Spark's aggregated rows ``(range, rows, sum 1, sum 2)`` as ``Sums``."""
    return {int(b): (int(n), int(s1), int(s2)) for b, n, s1, s2 in rows}
