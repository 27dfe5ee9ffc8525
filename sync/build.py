"""A follower built from its config: its sink, its tables' mappings, its dead-letter topic and version lookups.

The daemon's queries (``sync.stream``), their Spark workers (``sync.executors``),
and a bootstrap's or reindex's replay (``snapshot``) all build theirs here.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError
from cdcsync.resolvers import BinlogPositions, SnapshotLsns
from cdcsync.sync import backfill, held, reindex_needed
from cdcsync.sync.catalog import learner, mappings_for
from cdcsync.sync.dead_letters import DeadLetters, ensure_dead_letter_topic
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.reselect import reselector
from cdcsync.sync.sinks import build_sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_gc_tuned = False


def tune_gc() -> None:
    """Make the cyclic garbage collector run less often in a follower's process (once per process).

    A batch allocates several containers per record (the parsed key and
    envelope, the document, the change); none of them is cyclic, and
    reference counting frees them. With the default threshold (700
    allocations) the collector still runs every few records and now and then
    walks the whole heap: about a quarter of the per-record time in
    ``python -m bench``'s profile. ``freeze`` leaves the modules and config
    loaded so far out of every later collection.
    """
    global _gc_tuned
    if not _gc_tuned:
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        _gc_tuned = True


def build_follower(
    config: Config,
    follower: FollowerConfig,
    spark: SparkSession | None,
    mappings: dict[str, TableMapping] | None = None,
    open_sink: bool = True,
    fill: bool = False,
) -> Follower:
    """The follower with its sink and dead-letter topic; by default for all its tables.

    ``open_sink=False`` leaves the live store alone (no index, alias or table
    created): bootstrap and reindex ``stage`` a new store instead, and a new
    follower's readers must see nothing until it is published. ``fill``: the
    follower of a bootstrap or reindex filling that staged generation, on the
    driver and alone, writes with the sink's ``fill_writers``.
    """
    if follower.documents is not None:  # it keeps documents of related tables, not one target per table
        from cdcsync.sync.documents.build import build_document_follower

        return build_document_follower(config, follower, spark, open_sink=open_sink, fill=fill)
    mappings = mappings_for(config, follower) if mappings is None else mappings
    if not mappings:
        raise FatalError(f"follower {follower.name}: follows no table; check its tables and the sources")
    tune_gc()
    sink = build_sink(config, follower, spark, fill=fill)
    if open_sink:  # a table the sink refuses alone is held (sync.held), the follower starts with the others
        held.open_tables(config, follower.name, sink, mappings)
    ensure_dead_letter_topic(config, follower)
    tables = {source.topic(table): (source, table) for source, table in config.followed_tables(follower)}
    built = Follower(
        follower.name,
        sink,
        mappings,
        DeadLetters(config.kafka.client_config(), follower.dlq_topic, follower.name),
        max_attempts=follower.sink_attempts,
        binlog_seq=BinlogPositions.of(config),
        snapshot_lsn=SnapshotLsns.of(config),
        learn=learner(config, follower),
        reindex_needed=lambda mapping, reason: reindex_needed.mark(config, follower.name, mapping.table, reason),
        remember=lambda known: reindex_needed.remember(config, follower.name, known),
        writers=sink.fill_writers if fill else None,
        backfill=lambda topic, columns: backfill.request(config, *tables[topic], columns, follower.name),
        chunk_bytes=follower.batch_bytes,
        reselect=reselector(config, follower),  # a source copy (apply_rows) reads right already: never asked
    )
    if open_sink:  # the live store: what DDL did while it was stopped (a staged one is filled with today's shape)
        reindex_needed.changed_while_stopped(config, built)
    return built
