"""Spark JDBC reads of one table inside a source read's snapshot, in pieces (``bootstrap --from source``).

A table is read in pieces of about ROWS_PER_PIECE rows, each its own query
that joins the read's snapshot through ``sessionInitStatement``: a single
integer key is split into ranges, any other key on a hash of its columns.
Columns of TEXT_KINDS are read as text and parsed like Debezium's values
(``snapshot.source``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from cdcsync.config import SourceConfig, TableRef
from cdcsync.snapshot.reads import PostgresRead, SourceRead
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
    spark: SparkSession, source: SourceConfig, table: TableRef, mapping: TableMapping, read: SourceRead
) -> list[Piece]:
    """Spark JDBC reads of one table inside the read's snapshot, one per piece of about ROWS_PER_PIECE rows.

    A single integer key is split into ranges; any other key on a hash of its
    columns. Each piece is its own query, so each joins the read's snapshot
    through ``sessionInitStatement``. Each is returned unplanned, to be
    planned and run on a reader thread: planning asks the database for the
    table's schema, ~0.15 s a piece that the caller's thread would otherwise
    spend before the first row.
    """
    name = qualified(source, table)
    options = {
        "driver": "org.postgresql.Driver" if source.kind == "postgres" else "org.mariadb.jdbc.Driver",
        "user": source.user,
        "password": source.password.get_secret_value(),
        "sessionInitStatement": read.session_init(),
        "fetchsize": "5000",
    }
    # A Postgres point is JDBC OTHER, which Spark cannot read: as text, "(x,y)" (sync.mapping reads it); MariaDB's
    # spatial values arrive as bytes.
    # A Postgres date as text too: a year past 9999 has no Python date, nor 'infinity' (sync.far_time).
    # MariaDB's BIT too, written as its digits by the chunk query (_maria_columns).
    as_text = TEXT_KINDS | (
        {"point", "pg_text", "geometric", "date", "bits"} if source.kind == "postgres" else {"bits"}
    )
    text_columns = [c for c, kind in mapping.types.items() if kind in as_text]
    if text_columns:
        options["customSchema"] = ", ".join(f"`{c}` STRING" for c in text_columns)
    relation = name
    if not isinstance(read, PostgresRead):
        select = f"{_maria_columns(mapping)}, {read.position_columns()}"
        relation = f"(SELECT {select} FROM {name} t) AS cdcsync_chunk"
    count = max(1, math.ceil(read.count(name) / ROWS_PER_PIECE))
    keys = mapping.key_columns
    if count == 1:
        predicates = ["1 = 1"]
    elif len(keys) == 1 and mapping.types.get(keys[0]) == "int":
        predicates = range_predicates(source, keys[0], read.key_bounds(name, keys[0]), count)
    else:  # every hash piece scans the whole table: few of them, larger
        predicates = hash_predicates(source, keys, min(count, MAX_HASH_PIECES))
    url = _jdbc_url(source)
    return [partial(_read_piece, spark, url, relation, p, options) for p in predicates]


def _read_piece(spark: SparkSession, url: str, table: str, predicate: str, options: dict[str, str]) -> pa.Table:
    return spark.read.jdbc(url, table, predicates=[predicate], properties=options).toArrow()


def _maria_columns(mapping: TableMapping) -> str:
    """The chunk query's select list: MariaDB's UUID type reaches Spark as JDBC OTHER, which it cannot read, and
    the driver renders a BIT(n) as bytes no reader agrees on: each as text, a BIT as its n digits."""
    special = {c: kind for c, kind in mapping.types.items() if kind in ("uuid", "bits")}
    if not special:
        return "t.*"

    def column(c: str) -> str:
        quoted = "`" + c.replace("`", "``") + "`"
        if special.get(c) == "uuid":
            return f"CAST(t.{quoted} AS CHAR(36)) AS {quoted}"
        if special.get(c) == "bits":
            return f"LPAD(BIN(t.{quoted}), {mapping.widths.get(c, 1)}, '0') AS {quoted}"
        return f"t.{quoted}"

    return ", ".join(column(c) for c in mapping.types)


def range_predicates(source: SourceConfig, key: str, bounds: tuple[Any, Any], pieces: int) -> list[str]:
    """``pieces`` key ranges covering every value, the first and last open-ended."""
    low, high = int(bounds[0]), int(bounds[1])
    column = f'"{key}"' if source.kind == "postgres" else f"`{key}`"
    step = max(1, -(-(high - low + 1) // pieces))
    cuts = list(range(low + step, high + 1, step))[: pieces - 1]
    if not cuts:
        return ["1 = 1"]
    ranges = [f"{column} < {cuts[0]}"]
    ranges += [f"{column} >= {a} AND {column} < {b}" for a, b in zip(cuts, cuts[1:], strict=False)]
    return [*ranges, f"{column} >= {cuts[-1]}"]


def hash_predicates(source: SourceConfig, keys: tuple[str, ...], chunks: int) -> list[str]:
    if source.kind == "postgres":
        joined = ", ".join(f'"{k}"::text' for k in keys)
        expr = f"(hashtext(concat_ws('|', {joined})) & 2147483647)"
    else:
        expr = "CRC32(CONCAT_WS('|', {}))".format(", ".join(f"`{k}`" for k in keys))
    return [f"{expr} % {chunks} = {i}" for i in range(chunks)]


def _jdbc_url(source: SourceConfig) -> str:
    if source.kind == "postgres":
        return f"jdbc:postgresql://{source.host}:{source.port}/{source.database}"
    # The mysql scheme makes Spark pick its MySQL dialect (backtick quoting); the MariaDB driver accepts it.
    return f"jdbc:mysql://{source.host}:{source.port}/{source.database}?permitMysqlScheme&allowMultiQueries=true"


def qualified(source: SourceConfig, table: TableRef) -> str:
    if source.kind == "postgres":
        return f'"{table.namespace}"."{table.table}"'
    return f"`{table.namespace}`.`{table.table}`"
