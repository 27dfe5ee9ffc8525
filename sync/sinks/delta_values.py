"""The Delta sink's column values: each kind's column type, and a value's way into its column and back.

Column types follow the mapping (renamed, filtered by ``include``): decimal
DECIMAL(p,s) where the source's column type bounds every value to 38 digits
(``TableMapping.decimals``: MariaDB DECIMAL(p,s), BIGINT UNSIGNED), else STRING
holding the exact digits (Postgres' numeric holds NaN and ±Infinity; an
unconstrained one any number of digits), date DATE, timestamp TIMESTAMP (UTC),
bytes BINARY, bool BOOLEAN, int BIGINT, float DOUBLE, text/uuid STRING, time
STRING (ISO). Other kinds (json, array) and
undeclared columns are STRING holding the value's JSON text (lossless:
``"abc"``, ``5``, ``[1, 2]``); an undeclared column is added to the table the
first time a document carries it.

Stored form (``held``, ``stored_form``): Decimal normalised (``12.50`` ->
``12.5``; in a STRING column the same digits as text), datetimes aware UTC, time ISO text, dict/list JSON text
(``sort_keys``), the rest as is; ``None`` fields are left out (a column cannot
tell a null from an absent field).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from cdcsync.spark import IN_CHUNK
from cdcsync.sync.far_time import date_of_days, days_of, micros_of, timestamp_of_micros
from cdcsync.sync.mapping import Row, plain
from cdcsync.sync.values import EXACT, decimal_text

STRING, BIGINT, BOOLEAN, TIMESTAMP = T.StringType(), T.LongType(), T.BooleanType(), T.TimestampType()
# kind -> (column type, the canonical Python types it takes, their name in a rejection); other kinds: JSON text.
SPARK_TYPES: dict[str, tuple[T.DataType, type | tuple[type, ...], str]] = {
    "decimal": (STRING, (Decimal, int), "a decimal"),  # exact text; DECIMAL(p,s) kinds: decimal_kind
    "date": (T.DateType(), (date, str), "a date"),  # text: far from now (sync.far_time), put in as days
    "timestamp": (TIMESTAMP, (datetime, str), "a datetime"),  # ... as microseconds
    "time": (STRING, time, "a time"),
    "bytes": (T.BinaryType(), (bytes, bytearray, memoryview), "bytes"),
    "bool": (BOOLEAN, bool, "a bool"),
    "int": (BIGINT, int, "an int"),
    "float": (T.DoubleType(), (int, float), "a float"),
    "text": (STRING, str, "text"),
    "uuid": (STRING, str, "text"),
    "duration": (STRING, str, "text"),
    "pg_text": (STRING, str, "text"),
    "geometric": (STRING, str, "text"),
    "bits": (STRING, str, "text"),
}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DECIMAL_KIND = re.compile(r"decimal\((\d+),(\d+)\)")


def decimal_kind(precision: int, scale: int) -> str:
    """The sink's kind of a DECIMAL(precision, scale) column: ``decimal(12,2)``."""
    return f"decimal({precision},{scale})"


def column_kind(kind: str | None, column: str, decimals: dict[str, tuple[int, int]]) -> str | None:
    """A mapping's type -> the sink's kind of its column: a decimal the source bounds is a DECIMAL(p,s)."""
    return decimal_kind(*decimals[column]) if kind == "decimal" and column in decimals else kind


def is_decimal(kind: str | None) -> bool:
    return kind == "decimal" or _DECIMAL_KIND.fullmatch(kind or "") is not None


def frame(spark: SparkSession, data: list[tuple[Any, ...]], schema: T.StructType) -> DataFrame:
    """Encoded rows (``encode``) as a DataFrame for a MERGE's source, built from Arrow on the driver.

    ``createDataFrame`` of Python tuples makes an RDD of pickles that Python
    tasks convert each time a plan reads it, and a MERGE reads its source more
    than once. From an Arrow table, Spark keeps a batch under
    ``spark.sql.execution.arrow.localRelationThreshold`` (48 MB) as a local
    relation, read by the JVM alone (docs/performance.md, "Delta: the MERGE's
    source").

    In one partition: a local relation is otherwise split into one partition
    per task slot, a MERGE reads its source in ~6 of its jobs (the
    broadcasts of its joins), each then a task per slot over a few rows, and
    writes a file per partition. One partition: one file per MERGE instead of
    five, and a MERGE 4-12 % faster (docs/performance.md, "Delta: the MERGE's
    source in one partition").
    """
    return spark.createDataFrame(arrow_table(data, schema), schema).coalesce(1)


def arrow_table(data: list[tuple[Any, ...]], schema: T.StructType) -> pa.Table:
    """Encoded rows as an Arrow table of ``schema``'s Arrow types."""
    arrow = to_arrow_schema(schema)
    columns = list(zip(*data, strict=True)) if data else [() for _ in arrow]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, arrow, strict=True)], schema=arrow)


def spark_type(kind: str | None) -> T.DataType:
    if kind in SPARK_TYPES:
        return SPARK_TYPES[kind][0]
    bounded = _DECIMAL_KIND.fullmatch(kind or "")
    return T.DecimalType(int(bounded[1]), int(bounded[2])) if bounded else STRING


def kind_of(data_type: T.DataType) -> str | None:
    """The kind of a table column the mapping does not declare (STRING: JSON text)."""
    if isinstance(data_type, T.DecimalType):
        return decimal_kind(data_type.precision, data_type.scale)
    return next((k for k, (t, _, _) in SPARK_TYPES.items() if t == data_type != STRING), None)


# Delta refuses these characters in a column name unless the table maps its columns by name (a column
# "Order Id"): such a table is made, or upgraded, with column mapping (Delta reader 2, writer 5).
UNMAPPABLE = re.compile(r"[ ,;{}()\n\t=]")
COLUMN_MAPPING = {"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"}


def needs_column_mapping(columns: Iterable[str]) -> bool:
    return any(UNMAPPABLE.search(name) for name in columns)


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def read_column(name: str, kind: str | None) -> Column:
    """A column as ``held`` reads it: timestamps as epoch micros (``collect`` would make them local time), dates
    as days (Python's ``date`` ends at 9999)."""
    column = F.col(quote(name))
    if kind == "timestamp":
        return F.unix_micros(column).alias(name)
    return F.unix_date(column).alias(name) if kind == "date" else column


def commit_ts(row: Row) -> datetime | None:
    ms = row.change.commit_ts_ms
    return None if ms is None else EPOCH + timedelta(milliseconds=ms)


def utc(value: datetime) -> datetime:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)


def encode(kind: str | None, value: Any, name: str) -> Any:
    """A canonical value -> the value put in the column; ValueError/TypeError if it does not fit."""
    if value is None:
        return None
    bounded = _DECIMAL_KIND.fullmatch(kind or "")
    if kind not in SPARK_TYPES and not bounded:
        return json.dumps(value, sort_keys=True)
    _, accepted, what = SPARK_TYPES["decimal" if bounded else str(kind)]
    fits = isinstance(value, accepted) and isinstance(value, bool) == (kind == "bool")
    if not fits or (kind == "date" and isinstance(value, datetime)):
        raise TypeError(f"column {name}: {type(value).__name__} {value!r:.80} is not {what}")
    if kind == "decimal":
        return decimal_text(Decimal(value))
    if bounded:  # at most precision - scale digits before the point and scale after it: never rounded
        exact, precision, scale = Decimal(value), int(bounded[1]), int(bounded[2])
        step = Decimal(1).scaleb(-scale)
        too_wide = exact.is_finite() and not exact.is_zero() and exact.adjusted() >= precision - scale
        if not exact.is_finite() or too_wide or exact.quantize(step, context=EXACT) != exact:
            raise ValueError(f"column {name}: {value} does not fit DECIMAL({precision},{scale})")
        return exact
    if kind == "int" and not -(2**63) <= value < 2**63:
        raise ValueError(f"column {name}: {value} does not fit BIGINT")
    if kind in ("date", "timestamp") and isinstance(value, str):  # before year 1 or after 9999
        return _far(kind, value, name)
    converters: dict[str, Any] = {"timestamp": utc, "time": time.isoformat, "bytes": bytes, "float": float}
    return converters.get(str(kind), lambda v: v)(value)


def _far(kind: str | None, value: str, name: str) -> int:
    """A far date's days or timestamp's microseconds since 1970: Spark's DATE and TIMESTAMP hold them as such."""
    if kind == "date":
        return days_of(value)
    micros = micros_of(value)
    if not -(2**63) <= micros < 2**63:  # Postgres' last 29 years, from 294247 AD
        raise ValueError(f"column {name}: {value} is past TIMESTAMP's range (294247 AD)")
    return micros


def decode(kind: str | None, value: Any) -> Any:
    """A column value as read (timestamps as epoch micros, dates as days) -> the canonical value."""
    if value is None:
        return None
    if kind == "timestamp":
        return timestamp_of_micros(value)
    if kind == "date":
        return date_of_days(value)
    if kind == "time":
        return time.fromisoformat(value)
    if kind == "decimal":
        return Decimal(value)
    if kind in SPARK_TYPES or _DECIMAL_KIND.fullmatch(kind or ""):
        return bytes(value) if isinstance(value, bytearray) else value
    try:
        return json.loads(value)
    except ValueError:  # a column the mapping no longer types (dropped from the source): its value as stored
        return value


# Kinds whose column value, as read, is already its stored form: ``read_back`` leaves them as they are.
AS_READ = frozenset({"text", "uuid", "duration", "pg_text", "geometric", "bits", "int", "bool", "float"})


def read_back(kind: str | None) -> Callable[[Any], Any] | None:
    """A column value as read (not None) -> its stored form: ``stored(decode(kind, value))``; None where that is
    the value itself (most columns: the per-value calls were a third of a Delta verify's Python time)."""
    return None if kind in AS_READ else partial(_read_back, kind)


def _read_back(kind: str | None, value: Any) -> Any:
    return stored(decode(kind, value))


def stored(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_finite():
        return Decimal(decimal_text(value))  # one representative per value: 12.50 -> 12.5, 1E+2 -> 100, -0 -> 0
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, time):
        return value.isoformat()
    if isinstance(value, dict | list | tuple):  # a numeric[] read from the source holds Decimals: their digits
        return json.dumps(value, sort_keys=True, default=_exact)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _exact(value: Any) -> Any:
    """A value in a JSON column as the change held it: a decimal's exact digits (``1.50``: Debezium's text)."""
    return format(value, "f") if isinstance(value, Decimal) else plain(value)


def among(column: str, keys: Sequence[str], chunk: int = IN_CHUNK) -> Column:
    """``column IN (keys)``, written so that the scans of a table skip what holds none of ``keys``.

    Each key is a binary literal of its UTF-8 bytes cast to a string (``CAST(X'6127' AS STRING)``): exact
    whatever it holds, with no escaping to get right. Delta's file statistics, and Spark's Parquet filter
    for a list longer than ``spark.sql.parquet.pushdown.inFilterThreshold``, test an ``IN`` list only
    against its smallest and largest key; a list of up to that many keys goes to Parquet as one equality
    per key, which its page indexes test one by one. So the keys go as an ``OR`` of lists of ``chunk``
    (``cdcsync.spark`` sets the threshold to ``IN_CHUNK``), after the whole list: a row read is tested
    against the ``OR`` only when the whole list, one hash lookup, matches it.
    """
    literals = [f"CAST(X'{key.encode().hex()}' AS STRING)" for key in keys]
    lists = [", ".join(literals[i : i + chunk]) for i in range(0, len(literals), chunk)]
    return F.expr(f"{column} IN ({', '.join(literals)}) AND (" + " OR ".join(f"{column} IN ({c})" for c in lists) + ")")
