"""The Delta sink's change history table (``history=True``): one row per change, inserted, never updated.

``<path>/<target>__history`` gets the changes of each MERGE into the live
table, and a spooled staged table's all at once when it is published. Both
go in by a MERGE that inserts only an (id, version) the table lacks, so a
replayed batch or a rebuild adds nothing. The live and the staged table share
it, so its writers take turns (``delta_writers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from cdcsync.sync.mapping import Row, fingerprint
from cdcsync.sync.sinks.delta_values import BIGINT, BOOLEAN, STRING, TIMESTAMP, commit_ts, frame
from cdcsync.sync.sinks.delta_writers import one_writer

if TYPE_CHECKING:
    from cdcsync.sync.sinks.delta import DeltaSink
    from cdcsync.sync.sinks.delta_tables import Table

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


def append_history(sink: DeltaSink, table: Table, records: list[tuple[Row, dict[str, Any]]]) -> None:
    data = [
        (row.doc_id, row.change.op, row.version, commit_ts(row), row.doc is None,
         None if row.doc is None else fingerprint(row.doc))
        for row, _ in records
    ]  # fmt: skip
    insert_history(sink, table, frame(sink._spark, data, HISTORY))


def insert_history(sink: DeltaSink, table: Table, source: DataFrame) -> None:
    key = "t._cdcsync_id = s._cdcsync_id AND t._cdcsync_version = s._cdcsync_version"
    with one_writer(table.history):  # shared by the live and the staged table
        target = DeltaTable.forPath(sink._spark, table.history).alias("t")
        target.merge(source.alias("s"), key).whenNotMatchedInsertAll().execute()
        sink._checkpoints.committed(table.history)
