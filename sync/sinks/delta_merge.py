"""The Delta sink's writes of one table's rows: encoded for their columns, then MERGEd, or spooled if staged.

A live table gets one version-guarded MERGE (``merged``): update when the
incoming version is higher, insert an unknown id, keep the last data of a
delete with ``soft_delete``. A staged table's rows go to a Parquet file of its
spool (``spooled``), which its publish loads (``delta_load``). Rows whose
values do not fit their columns are rejected before either (``encoded``).
``Merge`` does both, with the sink's tables (``delta_tables.Tables``), its
history writer (``delta_history``) and its settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdcsync.errors import Errors
from cdcsync.sync.mapping import Row, fingerprint
from cdcsync.sync.sink import WriteResult
from cdcsync.sync.sinks import delta_load as load
from cdcsync.sync.sinks.delta_checkpoints import Checkpoints
from cdcsync.sync.sinks.delta_history import History
from cdcsync.sync.sinks.delta_tables import META, Table, Tables
from cdcsync.sync.sinks.delta_values import STRING, among, commit_ts, encode, frame, quote, spark_type
from cdcsync.sync.sinks.delta_writers import one_writer

# A spooled row with a history (delta_load): META, then what the history table keeps of its change.
SPOOLED = T.StructType(META.fields + [T.StructField("_cdcsync_op", STRING), T.StructField("_cdcsync_doc", STRING)])

# The MERGE's ON condition also names the batch's keys, a predicate on the table alone: its scans of the table read
# only the Parquet pages that may hold one (docs/performance.md, "Delta: a MERGE that prunes by key"). Up to
# PRUNE_KEYS keys (a batch at 1k changes/s holds a few thousand); a larger batch, a catch-up's, MERGEs without it.
PRUNE_BY_KEY = True
PRUNE_KEYS = 5000


@dataclass
class Merge:
    """A table's rows of a batch written: MERGEd into its live table, or spooled if it is staged (module docstring)."""

    tables: Tables  # the Spark session, the spools, and the columns a write adds or drops
    changes: History  # the history table's writer (used only with history=True)
    checkpoints: Checkpoints  # told of each commit (delta_checkpoints)
    errors: Errors
    soft_delete: bool
    history: bool

    def write_target(self, table: Table, rows: list[Row]) -> WriteResult:
        """One table's rows of a batch (one row per id): spooled if the table is staged, else MERGEd in its turn."""
        spool = self.tables.spools.get(table.path)
        if spool is not None:  # a file of its own: no turn to take
            return self.spooled(table, spool, rows)
        with one_writer(table.path):  # delta_writers: a reindex and the daemon take turns on the live table
            return self.merged(table, rows)

    def encoded(
        self, table: Table, rows: list[Row], result: WriteResult
    ) -> tuple[list[tuple[Row, dict[str, Any]]], dict[str, str | None]]:
        """Each row with its values encoded for their columns, and the columns they bring; the rest rejected."""
        self.tables.drop_columns(table)
        records: list[tuple[Row, dict[str, Any]]] = []
        new: dict[str, str | None] = {}
        for row in rows:
            try:
                values = {n: encode(table.kinds.get(n, table.learned.get(n)), v, n) for n, v in (row.doc or {}).items()}
            except (ValueError, TypeError, ArithmeticError) as err:
                result.rejected.append((row, str(err)))
                continue
            new.update({n: table.learned.get(n) for n in values if n not in table.kinds})
            records.append((row, values))
        return records, new

    def spooled(self, table: Table, spool: load.Spool, rows: list[Row]) -> WriteResult:
        """A staged table's rows into its spool, one file: all applied for now; the publish keeps the newest."""
        result = WriteResult()
        records, new = self.encoded(table, rows, result)
        table.kinds.update(new)  # the spool's files carry their columns; the load writes the table's schema
        if records:
            names = list(table.kinds)
            with self.errors(f"spooling into {spool.where}"):
                spool.add(SPOOLED if self.history else META, {n: table.kinds[n] for n in names}, table.dropped, [
                    (*meta(row, self.history), *(values.get(n) for n in names)) for row, values in records
                ])  # fmt: skip
        result.applied = len(records)
        return result

    def merged(self, table: Table, rows: list[Row]) -> WriteResult:
        """One version-guarded MERGE of the rows into the live table (its turn taken), and their history."""
        result = WriteResult()
        records, new = self.encoded(table, rows, result)
        if not records:
            return result
        self.tables.add_columns(table, new)
        names = list(table.kinds)
        schema = T.StructType(META.fields + [T.StructField(n, spark_type(table.kinds[n])) for n in names])
        data = [(*meta(row, False), *(values.get(n) for n in names)) for row, values in records]
        every: dict[str, str | Column] = {quote(n): f"s.{quote(n)}" for n in schema.fieldNames()}
        guard = "s._cdcsync_version > t._cdcsync_version"
        with self.errors(f"merging into {table.path}"):
            source = frame(self.tables.spark, data, schema)
            same = "t._cdcsync_id = s._cdcsync_id"
            on: str | Column = same
            if PRUNE_BY_KEY and len(data) <= PRUNE_KEYS:  # the same rows match: every source key is among them
                on = F.expr(same) & among("t._cdcsync_id", [row[0] for row in data])
            merge = DeltaTable.forPath(self.tables.spark, table.path).alias("t").merge(source.alias("s"), on)
            if self.soft_delete:  # keep the last data, record the delete
                kept: dict[str, str | Column] = {n: f"s.{n}" for n in META.fieldNames()}
                merge = merge.whenMatchedUpdate(condition=f"{guard} AND s._cdcsync_deleted", set=kept)
            merge = merge.whenMatchedUpdate(condition=guard, set=every).whenNotMatchedInsert(values=every)
            metrics = merge.execute().collect()[0]
            self.checkpoints.committed(table.path)
            if self.history:
                self.changes.append(table, records)
        result.applied = int(metrics["num_inserted_rows"]) + int(metrics["num_updated_rows"])
        result.older = len(records) - result.applied
        return result


def meta(row: Row, history: bool) -> tuple[Any, ...]:
    """A row's META columns (and, with a history, its change's op and document) in their order."""
    columns = (row.doc_id, row.version, row.doc is None, commit_ts(row))
    return (*columns, row.change.op, None if row.doc is None else fingerprint(row.doc)) if history else columns
