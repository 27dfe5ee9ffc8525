"""The Delta sink's publish of one staged table: its rows overwrite the live table in one commit, then it goes.

Readers see the live table's previous version until that commit
(``overwriteSchema``: a reindex may change its columns' types). A spooled
staged table holds no rows, so what is published is its spool's newest row of
each id (``delta_load``), and with ``history=True`` the spool's changes go to
the history table first (``delta_history``). The overwrite takes its turn with
the live table's other cdcsync writers (``delta_writers``). Each function
takes the sink whose tables it publishes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from cdcsync.sync.sinks import delta_load as load
from cdcsync.sync.sinks import delta_tables as tables
from cdcsync.sync.sinks.delta_history import HISTORY, insert_history
from cdcsync.sync.sinks.delta_tables import META, Table
from cdcsync.sync.sinks.delta_writers import one_writer

if TYPE_CHECKING:
    from cdcsync.sync.sinks.delta import DeltaSink

# The sink's own logger: what is logged here is the sink's doing, and is found under its name.
log = logging.getLogger("cdcsync.sync.sinks.delta")


def publish_one(sink: DeltaSink, target: str) -> None:
    staged, live = sink._tables[target], f"{sink.path}/{target}"
    spool = sink._spools.pop(staged.path, None)
    with one_writer(live), sink._errors(f"publishing {staged.path} to {live}"):
        if spool:
            rows = _loaded(sink, staged, spool)
        else:  # a staged table MERGEd batch by batch: its rows in ranges of ids, as a load's (delta_load.newest)
            rows = sink._spark.read.format("delta").load(staged.path).repartitionByRange(load.ID)
            rows = rows.sortWithinPartitions(load.ID)
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(live)
    sink._tables[target] = Table(live, staged.kinds, staged.history)
    sink.generations.published(target)
    tables.remove(sink, staged.path)
    if spool:
        tables.remove(sink, spool.where)


def _loaded(sink: DeltaSink, staged: Table, spool: load.Spool) -> DataFrame:
    """The rows to publish of a spooled staged table: the newest of each id in its spool (``delta_load``).

    The staged table itself holds no rows; the changes go to the history table here.
    """
    files = spool.files()
    if not files:
        return sink._spark.read.format("delta").load(staged.path)
    kinds, dropped = spool.kinds()  # of every process that wrote to it
    gone = staged.dropped | dropped
    staged.kinds = {n: k for n, k in (kinds | staged.kinds).items() if n not in gone}
    if sink.history:
        changes = sink._spark.read.option("mergeSchema", "true").parquet(spool.where)
        changes = changes.select(*HISTORY.fieldNames()).dropDuplicates(["_cdcsync_id", "_cdcsync_version"])
        insert_history(sink, staged, changes)
    log.info("sink=%s table=%s publishing_from=%s files=%d", sink.name, staged.path, spool.where, len(files))
    return load.newest(sink._spark, spool.where, META, staged.kinds, sink.soft_delete)
