"""The Delta sink's change history table (``history=True``): one row per change, inserted, never updated.

``<path>/<target>__history`` gets the changes of each MERGE into the live
table, and a spooled staged table's all at once when it is published. Both
go in by a MERGE that inserts only an (id, version) the table lacks, so a
replayed batch or a rebuild adds nothing. The live and the staged table share
it, so its writers take turns (``delta_writers``). Its rows are ``HISTORY``'s
(``delta_tables``, which makes the table beside its live one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame

from cdcsync.sync.mapping import Row, fingerprint
from cdcsync.sync.sinks.delta_checkpoints import Checkpoints
from cdcsync.sync.sinks.delta_tables import HISTORY, Table, Tables
from cdcsync.sync.sinks.delta_values import commit_ts, frame
from cdcsync.sync.sinks.delta_writers import one_writer


@dataclass
class History:
    """Writes the changes of a table's rows into its history table (module docstring)."""

    tables: Tables  # the Spark session
    checkpoints: Checkpoints  # told of each commit (delta_checkpoints)

    def append(self, table: Table, records: list[tuple[Row, dict[str, Any]]]) -> None:
        data = [
            (row.doc_id, row.change.op, row.version, commit_ts(row), row.doc is None,
             None if row.doc is None else fingerprint(row.doc))
            for row, _ in records
        ]  # fmt: skip
        self.insert(table, frame(self.tables.spark, data, HISTORY))

    def insert(self, table: Table, source: DataFrame) -> None:
        key = "t._cdcsync_id = s._cdcsync_id AND t._cdcsync_version = s._cdcsync_version"
        with one_writer(table.history):  # shared by the live and the staged table
            target = DeltaTable.forPath(self.tables.spark, table.history).alias("t")
            target.merge(source.alias("s"), key).whenNotMatchedInsertAll().execute()
            self.checkpoints.committed(table.history)
