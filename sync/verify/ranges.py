"""Range checksums: a Delta table compared with its source table where each side is stored.

``verify``'s row-by-row path digests every row in Python on both sides
(~37 us of CPU a row against a Delta table, docs/performance.md). Where a
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
and kind its source kind writes (``Checksums.forms``), the Delta table giving
it the same kind; and the Delta table's columns exactly the mapping's fields.
A value whose two texts can differ though both stores hold it alike (an
infinite timestamp: Postgres' ``infinity``, the Delta table's far
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
from cdcsync.sources import kind_of
from cdcsync.sync.mapping import TableMapping

RANGE_ROWS = 500  # rows a range, by the catalog's estimate
BUCKETS, MOST_BUCKETS = 4096, 65536  # ranges of a table, at least and at most
ROW_PATH_SHARE = 0.25  # differing ranges holding more of the table: the whole table is read row by row
RUNS = 200  # runs of differing ranges a source query names by key; more: by range number (a scan of the table)
Sums = dict[int, tuple[int, int, int]]  # range -> (rows, sum of hash slice 1, sum of hash slice 2)

# The Delta table's piece of a row text for a non-null value, by the kind its column has; each source kind
# writes its own (``sources.checksums.Checksums.forms``), equal stored values giving the same bytes.
SPARK_PIECES = ("coalesce(concat(CAST(octet_length({t}) AS STRING), ':', {t}), '~')", "coalesce(concat({t}, ','), '~')")
SPARK_FORMS: dict[str, str] = {
    "int": "CAST({c} AS STRING)",
    "text": "{c}",
    "uuid": "{c}",
    "bool": "CAST({c} AS STRING)",
    "timestamp": "CAST(unix_micros({c}) AS STRING)",
    "date": "CAST(unix_date({c}) AS STRING)",
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
    store_text: str  # the same, Spark SQL over the Delta table's columns

    def source_bucket(self) -> str:
        sums = kind_of(self.dialect).checksums
        return self._bucket(sums.as_bigint(kind_of(self.dialect).quote(self.key)), sums.integer_division())

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
            return kind_of(self.dialect).checksums.one_of(self.source_bucket(), numbers)
        key = kind_of(self.dialect).quote(self.key)
        parts = []
        for first, last in runs:
            start = f"{key} >= {self.low + first * self.width}" if first else ""
            end = f"{key} < {self.low + (last + 1) * self.width}" if last < self.buckets - 1 else ""
            parts.append(" AND ".join(p for p in (start, end) if p) or "true")
        return " OR ".join(f"({p})" for p in parts)

    def store_where(self, ranges: list[int]) -> str:
        """Spark SQL: the Delta table's rows of these ranges."""
        return f"{self.store_bucket()} IN ({', '.join(str(r) for r in sorted(ranges))})"


def plan(source: SourceConfig, table: TableRef, mapping: TableMapping, kinds: Mapping[str, str | None]) -> Plan | None:
    """The table's range checksums, or None where it takes the row path (the module docstring says which).

    ``kinds``: the Delta table's data columns and their kinds.
    """
    if len(mapping.key_columns) != 1 or mapping.plain_key is None or mapping.untyped:
        return None
    if mapping.types.get(mapping.key_columns[0]) != "int":  # its id the integer's digits (not a bool's, a decimal's)
        return None
    fields = mapping.fields()  # column -> (field, kind)
    if set(kinds) != {name for name, _ in fields.values()}:
        return None
    catalog = kind_of(source).checksums.catalog(source, table, mapping.key_columns[0])
    if catalog is None:
        return None
    types, low, high, estimated = catalog
    db, key = kind_of(source), mapping.key_columns[0]
    sums = db.checksums
    if types.get(key) not in sums.key_types:
        return None
    source_parts, store_parts = (
        [_piece(db.quote(key), sums.pieces, False)],
        [_piece("_cdcsync_id", SPARK_PIECES, False)],
    )
    for column, (name, kind) in sorted(fields.items(), key=lambda item: item[1][0]):
        form = sums.forms.get((types.get(column, ""), kind or ""))
        if form is None or kinds[name] != kind:
            return None
        source_parts.append(_piece(form.format(c=db.quote(column)), sums.pieces, kind == "text"))
        store_parts.append(_piece(SPARK_FORMS[str(kind)].format(c=_spark(name)), SPARK_PIECES, kind == "text"))
    buckets = min(max(BUCKETS, estimated // RANGE_ROWS), MOST_BUCKETS, high - low + 1)
    width = -(-(high - low + 1) // buckets)
    if low - width < -(2**62) or low + width * buckets > 2**62:  # the bucket arithmetic stays inside bigint
        return None
    return Plan(source.kind, key, low, width, buckets, sums.concat(source_parts), f"concat({', '.join(store_parts)})")


def source_sums(source: SourceConfig, table: TableRef, plan: Plan) -> Sums:
    """Each range's row count and hash sums in the source table, in one statement (one snapshot)."""
    kind = kind_of(plan.dialect)
    query = kind.checksums.sums_query(plan.source_bucket(), plan.source_text, kind.qualified(table))
    return {int(b): (int(n), int(s1), int(s2)) for b, n, s1, s2 in kind.fetch(source, query)}


def store_sums_sql(plan: Plan) -> tuple[str, str, list[str]]:
    """Spark SQL of the Delta table's side: the range, the hash, and the aggregates over them (``b``, ``h``)."""
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


def _piece(text: str, pieces: tuple[str, str], free: bool) -> str:
    """A field's part of a row's text, ``~`` for a null (no value starts with it).

    ``free``: text that may hold any character, written ``<bytes>:<text>``; any other value (digits, ``true``,
    a UUID, ``infinity``) holds no ``,`` and is written ``<text>,``, its SQL evaluated once.
    """
    free_form, plain_form = pieces
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


def _spark(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def summed(rows: list[Any]) -> Sums:
    """Spark's aggregated rows ``(range, rows, sum 1, sum 2)`` as ``Sums``."""
    return {int(b): (int(n), int(s1), int(s2)) for b, n, s1, s2 in rows}
