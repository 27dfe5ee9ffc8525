"""The Delta sink's publish of one staged table: its rows overwrite the live table in one commit, then it goes.

Readers see the live table's previous version until that commit
(``overwriteSchema``: a reindex may change its columns' types). A spooled
staged table holds no rows, so what is published is its spool's newest row of
each id (``delta_load``), and with ``history=True`` the spool's changes go to
the history table first (``delta_history``). The overwrite takes its turn with
the live table's other cdcsync writers (``delta_writers``). ``Publish``
publishes with the sink's tables (``delta_tables.Tables``), its history writer
and its staged generations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame

from cdcsync.errors import Errors
from cdcsync.sync.sink import Generations
from cdcsync.sync.sinks import delta_load as load
from cdcsync.sync.sinks.delta_history import History
from cdcsync.sync.sinks.delta_tables import HISTORY, META, Table, Tables
from cdcsync.sync.sinks.delta_writers import one_writer

# The sink's own logger: what is logged here is the sink's doing, and is found under its name.
log = logging.getLogger("cdcsync.sync.sinks.delta")


@dataclass
class Publish:
    """Publishes a sink's staged tables, one target at a time (module docstring)."""

    tables: Tables  # the staged and live tables, the spools, the Spark session
    changes: History  # the history table's writer (used only with history=True)
    generations: Generations  # the sink's staged targets: a published one is live again
    errors: Errors
    soft_delete: bool
    history: bool

    def publish_one(self, path: str, target: str) -> None:
        """Publish ``target``'s staged table to its live table in ``path`` (the sink's, as it is now)."""
        staged, live = self.tables[target], f"{path}/{target}"
        spool = self.tables.spools.pop(staged.path, None)
        with one_writer(live), self.errors(f"publishing {staged.path} to {live}"):
            if spool:
                rows = self._loaded(staged, spool)
            else:  # a staged table MERGEd batch by batch: its rows in ranges of ids, as a load's (delta_load.newest)
                rows = self.tables.spark.read.format("delta").load(staged.path).repartitionByRange(load.ID)
                rows = rows.sortWithinPartitions(load.ID)
            rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(live)
        self.tables[target] = Table(live, staged.kinds, staged.history)
        self.generations.published(target)
        self.tables.remove(staged.path)
        if spool:
            self.tables.remove(spool.where)

    def _loaded(self, staged: Table, spool: load.Spool) -> DataFrame:
        """The rows to publish of a spooled staged table: the newest of each id in its spool (``delta_load``).

        The staged table itself holds no rows; the changes go to the history table here.
        """
        files = spool.files()
        if not files:
            return self.tables.spark.read.format("delta").load(staged.path)
        kinds, dropped = spool.kinds()  # of every process that wrote to it
        gone = staged.dropped | dropped
        staged.kinds = {n: k for n, k in (kinds | staged.kinds).items() if n not in gone}
        if self.history:
            changes = self.tables.spark.read.option("mergeSchema", "true").parquet(spool.where)
            changes = changes.select(*HISTORY.fieldNames()).dropDuplicates(["_cdcsync_id", "_cdcsync_version"])
            self.changes.insert(staged, changes)
        log.info("sink=%s table=%s publishing_from=%s files=%d", self.tables.name, staged.path, spool.where, len(files))
        return load.newest(self.tables.spark, spool.where, META, staged.kinds, self.soft_delete)
