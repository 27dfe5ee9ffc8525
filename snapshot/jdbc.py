"""Spark JDBC reads of one table inside a source read's snapshot, in pieces (``bootstrap --from source``).

A table is read in pieces of about ROWS_PER_PIECE rows, each its own query
that joins the read's snapshot through ``sessionInitStatement``: a single
integer key is split into ranges, any other key on a hash of its columns.
Columns of TEXT_KINDS (and of the kind's ``jdbc_text_kinds``) are read as
text and parsed like Debezium's values (``snapshot.source``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from cdcsync.config import SourceConfig, TableRef
from cdcsync.sources import kind_of
from cdcsync.sources.snapshot import SnapshotRead
from cdcsync.sync.mapping import TableMapping

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

# Read as text over JDBC and parsed like Debezium's values: exact decimals, no
# time zone guesswork by the JVM or Python, and types Spark has no mapping for.
TEXT_KINDS = {"decimal", "time", "timestamp", "json", "uuid", "text", "interval", "duration"}
ROWS_PER_PIECE = 25_000  # rows per JDBC query: small enough to overlap reads with writes
MAX_HASH_PIECES = 8  # a key without ranges is split on a hash, and each such query reads every row
Piece = Callable[[], "pa.Table"]  # one piece's read: planned and run when called, on a reader thread


def pieces(
    spark: SparkSession, source: SourceConfig, table: TableRef, mapping: TableMapping, read: SnapshotRead
) -> list[Piece]:
    """Spark JDBC reads of one table inside the read's snapshot, one per piece of about ROWS_PER_PIECE rows.

    A single integer key is split into ranges; any other key on a hash of its
    columns. Each piece is its own query, so each joins the read's snapshot
    through ``sessionInitStatement``. Each is returned unplanned, to be
    planned and run on a reader thread: planning asks the database for the
    table's schema, ~0.15 s a piece that the caller's thread would otherwise
    spend before the first row.
    """
    kind = kind_of(source)
    name = kind.qualified(table)
    options = {
        "driver": kind.reads.jdbc_driver,
        "user": source.user,
        "password": source.password.get_secret_value(),
        "sessionInitStatement": read.session_init(),
        "fetchsize": "5000",
    }
    as_text = TEXT_KINDS | kind.reads.jdbc_text_kinds
    text_columns = [c for c, kind in mapping.types.items() if kind in as_text]
    if text_columns:
        options["customSchema"] = ", ".join(f"`{c}` STRING" for c in text_columns)
    relation = read.relation(name, mapping.types, mapping.widths)
    count = max(1, math.ceil(read.count(name) / ROWS_PER_PIECE))
    keys = mapping.key_columns
    if count == 1:
        predicates = ["1 = 1"]
    elif len(keys) == 1 and mapping.types.get(keys[0]) == "int":
        predicates = range_predicates(source, keys[0], read.key_bounds(name, keys[0]), count)
    else:  # every hash piece scans the whole table: few of them, larger
        predicates = hash_predicates(source, keys, min(count, MAX_HASH_PIECES))
    url = kind.reads.jdbc_url(source)
    return [partial(_read_piece, spark, url, relation, p, options) for p in predicates]


def _read_piece(spark: SparkSession, url: str, table: str, predicate: str, options: dict[str, str]) -> pa.Table:
    return spark.read.jdbc(url, table, predicates=[predicate], properties=options).toArrow()


def range_predicates(source: SourceConfig, key: str, bounds: tuple[Any, Any], pieces: int) -> list[str]:
    """``pieces`` key ranges covering every value, the first and last open-ended."""
    low, high = int(bounds[0]), int(bounds[1])
    column = kind_of(source).quote(key)
    step = max(1, -(-(high - low + 1) // pieces))
    cuts = list(range(low + step, high + 1, step))[: pieces - 1]
    if not cuts:
        return ["1 = 1"]
    ranges = [f"{column} < {cuts[0]}"]
    ranges += [f"{column} >= {a} AND {column} < {b}" for a, b in zip(cuts, cuts[1:], strict=False)]
    return [*ranges, f"{column} >= {cuts[-1]}"]


def hash_predicates(source: SourceConfig, keys: tuple[str, ...], chunks: int) -> list[str]:
    """``chunks`` pieces of a table split on a hash of its key columns."""
    kind = kind_of(source)
    expr = kind.reads.hash_bucket([kind.quote(k) for k in keys])
    return [f"{expr} % {chunks} = {i}" for i in range(chunks)]
