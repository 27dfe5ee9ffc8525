"""The Delta sink's tables: each target's columns, its table made or opened, altered, and removed.

A table is made if missing and otherwise taken as it is: its columns' types
checked against the mapping's (a decimal column keeps the type it was made
with), the columns the mapping gained added, and the properties cdcsync's
session gives new tables set where an earlier cdcsync's table lacks them.
Columns are added with ``ALTER TABLE``; one is dropped by rewriting the table
without it, as Delta drops a column in place only with column mapping.
Paths are removed through Hadoop's file system API, so any scheme works.
Each function takes the sink whose session and settings it works with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable
from pyspark.sql import types as T

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError, TableError
from cdcsync.state import base_dir
from cdcsync.sync.sinks import delta_checkpoints as checkpoints
from cdcsync.sync.sinks.delta_history import HISTORY
from cdcsync.sync.sinks.delta_values import (
    BIGINT,
    BOOLEAN,
    COLUMN_MAPPING,
    STRING,
    TIMESTAMP,
    column_kind,
    is_decimal,
    kind_of,
    needs_column_mapping,
    quote,
    spark_type,
)
from cdcsync.sync.sinks.delta_writers import one_writer

if TYPE_CHECKING:
    from cdcsync.sync.mapping import TableMapping
    from cdcsync.sync.sinks.delta import DeltaSink

# The sink's own logger: what is logged here is the sink's doing, and is found under its name.
log = logging.getLogger("cdcsync.sync.sinks.delta")

META = T.StructType(
    [
        T.StructField("_cdcsync_id", STRING, False),
        T.StructField("_cdcsync_version", BIGINT, False),
        T.StructField("_cdcsync_deleted", BOOLEAN, False),
        T.StructField("_cdcsync_commit_ts", TIMESTAMP),
    ]
)
# How long a table version's state keeps each replaced file's entry (delta.replaced_file_retention).
REPLACED_RETENTION = "delta.deletedFileRetentionDuration"
REPLACED_RETENTION_DEFAULT = "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"  # for new tables
# Table properties cdcsync's session gives new tables, and opening a table sets where it lacks them (a table an
# earlier cdcsync created): (property, the session's default for new tables).
PROPERTIES = ((REPLACED_RETENTION, REPLACED_RETENTION_DEFAULT), (checkpoints.PROPERTY, checkpoints.DEFAULT))


@dataclass
class Table:
    path: str
    kinds: dict[str, str | None]  # data column -> mapping kind (None: no declared type)
    history: str  # the change history table's path (used only with history=True)
    learned: dict[str, str | None] = dataclass_field(
        default_factory=dict
    )  # columns the table gained, before rows bring them
    forgotten: set[str] = dataclass_field(default_factory=set)  # columns the table lost, to drop before a write
    dropped: set[str] = dataclass_field(default_factory=set)  # columns dropped since it was staged (delta_load)


def table_root(config: Config, follower: FollowerConfig) -> str:
    """Where the follower's tables are: its ``path``, or ``<state>/warehouse/<follower>``."""
    return follower.path or str(base_dir(config) / "warehouse" / follower.name)


def wanted_columns(mappings: Sequence[TableMapping]) -> dict[str, dict[str, str | None]]:
    """Each target's data columns and their kinds, checked against each other and the sink's columns."""
    wanted: dict[str, dict[str, str | None]] = {}
    for mapping in mappings:
        columns = wanted.setdefault(mapping.target, {})
        for column in (*mapping.types, *(mapping.include or ())):
            if mapping.include is not None and column not in mapping.include:
                continue
            name = mapping.field(column)
            kind = column_kind(mapping.types.get(column), column, dict(mapping.decimals))
            if name.startswith("_cdcsync_"):
                raise FatalError(f"mapping {mapping.table}: column {name!r} clashes with the sink's columns")
            if columns.get(name, kind) != kind:
                raise FatalError(f"target {mapping.target}: column {name!r} is both {columns[name]} and {kind}")
            columns[name] = kind
    return wanted


def open_table(sink: DeltaSink, path: str, columns: dict[str, str | None], history: str | None = None) -> Table:
    schema = T.StructType(META.fields + [T.StructField(n, spark_type(k)) for n, k in columns.items()])
    table = Table(path, {}, history or f"{path}__history")
    with one_writer(path), sink._errors(f"opening {path}"):
        existing = _create(sink, path, schema, COLUMN_MAPPING if needs_column_mapping(columns) else {}, META)
        _checkpoint_here(sink, path, _set_properties(sink, path))
    if sink.history:
        with one_writer(table.history), sink._errors(f"opening {table.history}"):
            _create(sink, table.history, HISTORY, {}, HISTORY)
            _checkpoint_here(sink, table.history, _set_properties(sink, table.history))
    for field in existing.fields:
        if field.name in META.fieldNames():
            continue
        wanted = columns.get(field.name)
        if is_decimal(wanted) and (field.dataType == STRING or isinstance(field.dataType, T.DecimalType)):
            # A decimal column keeps the type it was made with (DECIMAL(38,10) before the column types
            # followed the source's): it reads back exactly, and a value it cannot hold is rejected naming
            # it. A reindex makes the column anew.
            table.kinds[field.name] = kind_of(field.dataType) or "decimal"
            continue
        if field.name in columns and field.dataType != spark_type(wanted):
            command = f"cdcsync reindex {sink.name} --table {path.rsplit('/', 1)[-1]} --from source"
            raise TableError(  # this table's alone: held, its follower's other tables go on (sync.held)
                path.rsplit("/", 1)[-1],
                f"{path}: column {field.name} is {field.dataType.simpleString()}, the mapping wants "
                f"{spark_type(columns[field.name]).simpleString()} (the source column changed type?); run "
                f"`{command}`, or fix the mapping",
                f"run `{command}`, or fix the mapping",
            )
        table.kinds[field.name] = columns.get(field.name, kind_of(field.dataType))
    add_columns(sink, table, {n: k for n, k in columns.items() if n not in table.kinds})
    return table


def _create(
    sink: DeltaSink, path: str, schema: T.StructType, properties: Mapping[str, str], plain: T.StructType
) -> T.StructType:
    """Create the table at ``path`` unless there is one; its schema.

    Delta takes a path-named table for an existing one as soon as its
    directory lists anything, and a store may keep a removed table's
    emptied directories a while (SeaweedFS's S3 gateway: up to ~2.5 min),
    so a ``stage`` that removes and makes the same path at once would find
    "a table" with no log. Where the directory holds nothing but empty
    directories, the table is made by writing no rows of ``plain`` (columns
    needing no column mapping) instead, with ``properties`` set after; the caller adds the rest. A
    directory holding files is left to Delta, which refuses it.
    """
    if DeltaTable.isDeltaTable(sink._spark, path) or not _only_directories(sink, path):
        builder = DeltaTable.createIfNotExists(sink._spark).location(path).addColumns(schema)
        for prop, value in properties.items():
            builder = builder.property(prop, value)
        builder.execute()
    else:
        sink._spark.createDataFrame([], plain).write.format("delta").mode("append").save(path)
        if properties:  # column mapping, as the builder would have set it
            listed = ", ".join(f"'{prop}' = '{value}'" for prop, value in properties.items())
            sink._spark.sql(f"ALTER TABLE delta.{quote(path)} SET TBLPROPERTIES ({listed})")
        log.info("sink=%s table=%s created_by=write (its directory outlived its removal)", sink.name, path)
    return DeltaTable.forPath(sink._spark, path).toDF().schema


def _set_properties(sink: DeltaSink, path: str) -> dict[str, str]:
    """Give a table the properties of ``PROPERTIES`` it lacks; the table's properties after that.

    New tables take them from the session's defaults (``cdcsync.spark``); this is for tables an earlier
    cdcsync created. A value an operator set on the table is left as it is. A session not made by
    ``cdcsync.spark`` has no such defaults, and Delta's own stay. Called holding the lock.
    """
    wanted = {prop: value for prop, default in PROPERTIES if (value := sink._spark.conf.get(default, None))}
    for prop, value in wanted.items():
        if "'" in value:
            raise FatalError(f"table property {prop}={value!r} (from the Spark session's defaults): want e.g. "
                             "'interval 1 hours' for delta.replaced_file_retention")  # fmt: skip
    # The table's metadata only (DESCRIBE DETAIL would also count its files: a Spark job).
    have = {row[0]: row[1] for row in sink._spark.sql(f"SHOW TBLPROPERTIES delta.{quote(path)}").collect()}
    missing = {prop: value for prop, value in wanted.items() if prop not in have}
    if missing:
        listed = ", ".join(f"'{prop}' = '{value}'" for prop, value in missing.items())
        sink._spark.sql(f"ALTER TABLE delta.{quote(path)} SET TBLPROPERTIES ({listed})")
        log.info("sink=%s table=%s set=%s (were Delta's defaults)", sink.name, path, missing)
    return have | missing


def _checkpoint_here(sink: DeltaSink, path: str, properties: dict[str, str]) -> None:
    """Have the log checkpoints of ``path`` written beside the batches if its interval is cdcsync's."""
    if properties.get(checkpoints.PROPERTY) == checkpoints.INTERVAL:
        sink._checkpoints.watch(path)


def add_columns(sink: DeltaSink, table: Table, columns: dict[str, str | None]) -> None:
    if not columns:
        return
    listed = ", ".join(f"{quote(n)} {spark_type(k).simpleString()}" for n, k in columns.items())
    with one_writer(table.path), sink._errors(f"adding columns to {table.path}"):
        if needs_column_mapping(columns):  # a no-op on a table that has it
            props = ", ".join(f"'{prop}' = '{value}'" for prop, value in COLUMN_MAPPING.items())
            sink._spark.sql(f"ALTER TABLE delta.{quote(table.path)} SET TBLPROPERTIES ({props})")
        sink._spark.sql(f"ALTER TABLE delta.{quote(table.path)} ADD COLUMNS ({listed})")
    table.kinds.update(columns)


def drop_columns(sink: DeltaSink, table: Table) -> None:
    gone = sorted(table.forgotten & table.kinds.keys())
    table.forgotten.clear()
    if not gone:
        return
    if table.path not in sink._spools:  # a spooled table holds no rows: its load leaves the columns out
        with one_writer(table.path), sink._errors(f"dropping columns {gone} from {table.path}"):
            rows = sink._spark.read.format("delta").load(table.path).drop(*gone)
            rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(table.path)
    for name in gone:
        del table.kinds[name]
    table.dropped.update(gone)
    log.info("sink=%s table=%s dropped_columns=%s", sink.name, table.path, gone)


def remove(sink: DeltaSink, path: str) -> None:
    """Delete a directory tree through Hadoop's file system API, so any ``path`` scheme works."""
    sink._checkpoints.forget(path)
    with sink._errors(f"removing {path}"):
        files, hadoop_path = _hadoop(sink, path)
        files.delete(hadoop_path, True)


def _only_directories(sink: DeltaSink, path: str) -> bool:
    """Whether ``path`` is a directory holding directories and not one file, at any depth."""
    files, hadoop_path = _hadoop(sink, path)
    if not files.exists(hadoop_path) or not files.listStatus(hadoop_path):
        return False
    return not files.listFiles(hadoop_path, True).hasNext()


def _hadoop(sink: DeltaSink, path: str) -> tuple[Any, Any]:
    """Hadoop's file system of ``path``, and ``path`` as its ``Path``."""
    context = sink._spark.sparkContext
    hadoop_path = context._jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
    return hadoop_path.getFileSystem(context._jsc.hadoopConfiguration()), hadoop_path  # type: ignore[union-attr]
