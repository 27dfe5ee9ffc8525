"""The Delta sink's column values: each kind's column type, and a value's way into its column and back.

Column types follow the mapping (renamed, filtered by ``include``): decimal
DECIMAL(38,10) (a value needing more digits is rejected, never rounded), date
DATE, timestamp TIMESTAMP (UTC), bytes BINARY, bool BOOLEAN, int BIGINT, float
DOUBLE, text/uuid STRING, time STRING (ISO). Other kinds (json, array) and
undeclared columns are STRING holding the value's JSON text (lossless:
``"abc"``, ``5``, ``[1, 2]``); an undeclared column is added to the table the
first time a document carries it.

Stored form (``held``, ``stored_form``): Decimal normalised (``12.50`` ->
``12.5``), datetimes aware UTC, time ISO text, dict/list JSON text
(``sort_keys``), the rest as is; ``None`` fields are left out (a column cannot
tell a null from an absent field).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from cdcsync.sync.sink import Row

STRING, BIGINT, BOOLEAN, TIMESTAMP = T.StringType(), T.LongType(), T.BooleanType(), T.TimestampType()
# kind -> (column type, the canonical Python types it takes, their name in a rejection); other kinds: JSON text.
SPARK_TYPES: dict[str, tuple[T.DataType, type | tuple[type, ...], str]] = {
    "decimal": (T.DecimalType(38, 10), (Decimal, int), "a decimal"),
    "date": (T.DateType(), date, "a date"),
    "timestamp": (TIMESTAMP, datetime, "a datetime"),
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
}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WIDE = Context(prec=80)
DEC_STEP = Decimal("1e-10")


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
    return SPARK_TYPES[kind][0] if kind in SPARK_TYPES else STRING


def kind_of(data_type: T.DataType) -> str | None:
    """The kind of a table column the mapping does not declare (STRING: JSON text)."""
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
    """A column as ``held`` reads it: timestamps as epoch micros (``collect`` would make them local time)."""
    column = F.col(quote(name))
    return F.unix_micros(column).alias(name) if kind == "timestamp" else column


def commit_ts(row: Row) -> datetime | None:
    ms = row.change.commit_ts_ms
    return None if ms is None else EPOCH + timedelta(milliseconds=ms)


def utc(value: datetime) -> datetime:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)


def encode(kind: str | None, value: Any, name: str) -> Any:
    """A canonical value -> the value put in the column; ValueError/TypeError if it does not fit."""
    if value is None:
        return None
    if kind not in SPARK_TYPES:
        return json.dumps(value, sort_keys=True)
    _, accepted, what = SPARK_TYPES[kind]
    fits = isinstance(value, accepted) and isinstance(value, bool) == (kind == "bool")
    if not fits or (kind == "date" and isinstance(value, datetime)):
        raise TypeError(f"column {name}: {type(value).__name__} {value!r:.80} is not {what}")
    if kind == "decimal":  # at most 28 digits before the point and 10 after it
        exact = Decimal(value)
        if not exact.is_finite() or exact.adjusted() > 27 or exact.quantize(DEC_STEP, context=WIDE) != exact:
            raise ValueError(f"column {name}: {value} does not fit DECIMAL(38,10)")
        return exact
    if kind == "int" and not -(2**63) <= value < 2**63:
        raise ValueError(f"column {name}: {value} does not fit BIGINT")
    converters: dict[str, Any] = {"timestamp": utc, "time": time.isoformat, "bytes": bytes, "float": float}
    return converters.get(kind, lambda v: v)(value)


def decode(kind: str | None, value: Any) -> Any:
    """A column value as read (timestamps as epoch micros) -> the canonical value."""
    if value is None:
        return None
    if kind == "timestamp":
        return EPOCH + timedelta(microseconds=value)
    if kind == "time":
        return time.fromisoformat(value)
    if kind in SPARK_TYPES:
        return bytes(value) if isinstance(value, bytearray) else value
    try:
        return json.loads(value)
    except ValueError:  # a column the mapping no longer types (dropped from the source): its value as stored
        return value


def stored(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_zero():
        return Decimal(0)
    if isinstance(value, Decimal) and value.is_finite():
        # One representative per value, never in exponent form: 12.50 -> 12.5, 1E+2 -> 100, -0 -> 0.
        normal = value.normalize(WIDE)
        return normal.quantize(Decimal(1), context=WIDE) if normal == normal.to_integral_value() else normal
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, time):
        return value.isoformat()
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value
