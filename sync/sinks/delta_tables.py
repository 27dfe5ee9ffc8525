"""The Delta sink's tables: each target's columns, its table made or opened, altered, and removed.

A table is made if missing and otherwise taken as it is: its columns' types
checked against the mapping's (a decimal column keeps the type it was made
with), the columns the mapping gained added, and the properties cdcsync's
session gives new tables set where an earlier cdcsync's table lacks them.
Columns are added with ``ALTER TABLE``; one is dropped by rewriting the table
without it, as Delta drops a column in place only with column mapping.
Paths are removed through Hadoop's file system API, so any scheme works.
``Tables`` holds the sink's tables by target, the spools its staged ones are
filled through (``delta_load``) and the Spark session they are read and written
with; the sink's other parts (``delta_merge``, ``delta_reads``,
``delta_publish``, ``delta_history``) reach its tables through it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence, ValuesView
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import Errors, FatalError, TableError
from cdcsync.state import base_dir
from cdcsync.sync.sinks import delta_checkpoints as checkpoints
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
    from cdcsync.sync.sinks.delta_load import Spool

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
# A row of a change history table (``delta_history``), made beside its table's.
HISTORY = T.StructType(
    [
        T.StructField("_cdcsync_id", STRING, False),
        T.StructField("_cdcsync_op", STRING, False),
        T.StructField("_cdcsync_version", BIGINT, False),
        T.StructField("_cdcsync_commit_ts", TIMESTAMP),
        T.StructField("_cdcsync_deleted", BOOLEAN, False),
        T.StructField("_cdcsync_doc", STRING),
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


class Tables:
    """The sink's tables by target (``Table``), made, altered and removed with its Spark session (module docstring).

    ``history``: each table has its change history table beside it (``delta_history``). ``spools``: a staged
    table's path -> the spool its writes go to (``delta_load``), which ``drop_columns`` leaves to the load.
    """

    def __init__(
        self,
        name: str,
        spark: SparkSession | None,
        history: bool,
        log_checkpoints: checkpoints.Checkpoints,
        errors: Errors,
    ) -> None:
        self.name, self.history, self.errors = name, history, errors
        self._session = spark
        self._checkpoints = log_checkpoints  # log checkpoints beside the batches (delta_checkpoints)
        self._tables: dict[str, Table] = {}
        self.spools: dict[str, Spool] = {}  # a staged table's path -> the spool its writes go to (delta_load)

    @property
    def spark(self) -> SparkSession:
        if self._session is None:
            raise FatalError(f"sink {self.name}: this process of a fill only writes its spool; it has no Spark session")
        return self._session

    def table(self, target: str) -> Table:
        if target not in self._tables:
            raise FatalError(f"sink {self.name}: target {target!r} was not opened")
        return self._tables[target]

    def __getitem__(self, target: str) -> Table:
        return self._tables[target]

    def __setitem__(self, target: str, table: Table) -> None:
        self._tables[target] = table

    def __contains__(self, target: object) -> bool:
        return target in self._tables

    def get(self, target: str) -> Table | None:
        return self._tables.get(target)

    def values(self) -> ValuesView[Table]:
        return self._tables.values()

    def clear(self) -> None:
        self._tables.clear()

    def open_table(self, path: str, columns: dict[str, str | None], history: str | None = None) -> Table:
        schema = T.StructType(META.fields + [T.StructField(n, spark_type(k)) for n, k in columns.items()])
        table = Table(path, {}, history or f"{path}__history")
        with one_writer(path), self.errors(f"opening {path}"):
            existing = self._create(path, schema, COLUMN_MAPPING if needs_column_mapping(columns) else {}, META)
            self._checkpoint_here(path, self._set_properties(path))
        if self.history:
            with one_writer(table.history), self.errors(f"opening {table.history}"):
                self._create(table.history, HISTORY, {}, HISTORY)
                self._checkpoint_here(table.history, self._set_properties(table.history))
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
                command = f"cdcsync reindex {self.name} --table {path.rsplit('/', 1)[-1]} --from source"
                raise TableError(  # this table's alone: held, its follower's other tables go on (sync.held)
                    path.rsplit("/", 1)[-1],
                    f"{path}: column {field.name} is {field.dataType.simpleString()}, the mapping wants "
                    f"{spark_type(columns[field.name]).simpleString()} (the source column changed type?); run "
                    f"`{command}`, or fix the mapping",
                    f"run `{command}`, or fix the mapping",
                )
            table.kinds[field.name] = columns.get(field.name, kind_of(field.dataType))
        self.add_columns(table, {n: k for n, k in columns.items() if n not in table.kinds})
        return table

    def _create(
        self, path: str, schema: T.StructType, properties: Mapping[str, str], plain: T.StructType
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
        if DeltaTable.isDeltaTable(self.spark, path) or not self._only_directories(path):
            builder = DeltaTable.createIfNotExists(self.spark).location(path).addColumns(schema)
            for prop, value in properties.items():
                builder = builder.property(prop, value)
            builder.execute()
        else:
            self.spark.createDataFrame([], plain).write.format("delta").mode("append").save(path)
            if properties:  # column mapping, as the builder would have set it
                listed = ", ".join(f"'{prop}' = '{value}'" for prop, value in properties.items())
                self.spark.sql(f"ALTER TABLE delta.{quote(path)} SET TBLPROPERTIES ({listed})")
            log.info("sink=%s table=%s created_by=write (its directory outlived its removal)", self.name, path)
        return DeltaTable.forPath(self.spark, path).toDF().schema

    def _set_properties(self, path: str) -> dict[str, str]:
        """Give a table the properties of ``PROPERTIES`` it lacks; the table's properties after that.

        New tables take them from the session's defaults (``cdcsync.spark``); this is for tables an earlier
        cdcsync created. A value an operator set on the table is left as it is. A session not made by
        ``cdcsync.spark`` has no such defaults, and Delta's own stay. Called holding the lock.
        """
        wanted = {prop: value for prop, default in PROPERTIES if (value := self.spark.conf.get(default, None))}
        for prop, value in wanted.items():
            if "'" in value:
                raise FatalError(f"table property {prop}={value!r} (from the Spark session's defaults): want e.g. "
                                 "'interval 1 hours' for delta.replaced_file_retention")  # fmt: skip
        # The table's metadata only (DESCRIBE DETAIL would also count its files: a Spark job).
        have = {row[0]: row[1] for row in self.spark.sql(f"SHOW TBLPROPERTIES delta.{quote(path)}").collect()}
        missing = {prop: value for prop, value in wanted.items() if prop not in have}
        if missing:
            listed = ", ".join(f"'{prop}' = '{value}'" for prop, value in missing.items())
            self.spark.sql(f"ALTER TABLE delta.{quote(path)} SET TBLPROPERTIES ({listed})")
            log.info("sink=%s table=%s set=%s (were Delta's defaults)", self.name, path, missing)
        return have | missing

    def _checkpoint_here(self, path: str, properties: dict[str, str]) -> None:
        """Have the log checkpoints of ``path`` written beside the batches if its interval is cdcsync's."""
        if properties.get(checkpoints.PROPERTY) == checkpoints.INTERVAL:
            self._checkpoints.watch(path)

    def add_columns(self, table: Table, columns: dict[str, str | None]) -> None:
        if not columns:
            return
        listed = ", ".join(f"{quote(n)} {spark_type(k).simpleString()}" for n, k in columns.items())
        with one_writer(table.path), self.errors(f"adding columns to {table.path}"):
            if needs_column_mapping(columns):  # a no-op on a table that has it
                props = ", ".join(f"'{prop}' = '{value}'" for prop, value in COLUMN_MAPPING.items())
                self.spark.sql(f"ALTER TABLE delta.{quote(table.path)} SET TBLPROPERTIES ({props})")
            self.spark.sql(f"ALTER TABLE delta.{quote(table.path)} ADD COLUMNS ({listed})")
        table.kinds.update(columns)

    def drop_columns(self, table: Table) -> None:
        gone = sorted(table.forgotten & table.kinds.keys())
        table.forgotten.clear()
        if not gone:
            return
        if table.path not in self.spools:  # a spooled table holds no rows: its load leaves the columns out
            with one_writer(table.path), self.errors(f"dropping columns {gone} from {table.path}"):
                rows = self.spark.read.format("delta").load(table.path).drop(*gone)
                rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(table.path)
        for name in gone:
            del table.kinds[name]
        table.dropped.update(gone)
        log.info("sink=%s table=%s dropped_columns=%s", self.name, table.path, gone)

    def remove(self, path: str) -> None:
        """Delete a directory tree through Hadoop's file system API, so any ``path`` scheme works."""
        self._checkpoints.forget(path)
        with self.errors(f"removing {path}"):
            files, hadoop_path = self._hadoop(path)
            files.delete(hadoop_path, True)

    def _only_directories(self, path: str) -> bool:
        """Whether ``path`` is a directory holding directories and not one file, at any depth."""
        files, hadoop_path = self._hadoop(path)
        if not files.exists(hadoop_path) or not files.listStatus(hadoop_path):
            return False
        return not files.listFiles(hadoop_path, True).hasNext()

    def _hadoop(self, path: str) -> tuple[Any, Any]:
        """Hadoop's file system of ``path``, and ``path`` as its ``Path``."""
        context = self.spark.sparkContext
        hadoop_path = context._jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
        return hadoop_path.getFileSystem(context._jsc.hadoopConfiguration()), hadoop_path  # type: ignore[union-attr]
