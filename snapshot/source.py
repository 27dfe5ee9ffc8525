"""``cdcsync bootstrap --from source``: a consistent read of the source database, aligned with the log.

For when the compacted topics do not hold the full state (a connector created
with ``snapshot.mode=no_data``, topics recreated, retention cut). Per source,
in this order (docs/bootstrap.md gives the reasoning):

1. capture the end offsets E1 of the source's followed topics. Everything
   before E1 was emitted before the read began, so the read reflects it;
2. open the read (``snapshot.reads``): an exported Postgres snapshot, or
   per-chunk MariaDB consistent snapshots that report their binlog position;
3. Postgres: wait until the connector has passed the snapshot, capture E2,
   and read the log window [E1, E2): each change is reflected or not by its
   transaction id, and snapshot rows take the highest reflected version;
4. read every table through Spark JDBC in pieces, ``--partitions`` of them at a time,
   and write the rows through the follower's sink with those versions
   (``snapshot.table_copy``; a large table in several processes);
5. MariaDB: wait until the connector has passed the furthest chunk, capture E2;
6. apply the window [E1, E2): unreflected changes win over the snapshot rows
   by version; reflected ones are dropped (Postgres, by transaction id) or are
   no-ops against the rows' versions (MariaDB);
7. record E2 as the follower's start position. ``cdcsync run`` streams on from
   there: no gap, no double apply.

The source keeps taking writes throughout; nothing is locked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from cdcsync.config import Config, FollowerConfig, SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.errors import FatalError
from cdcsync.events import PoisonRecord, Record, parse_record
from cdcsync.snapshot import jdbc, parallel, table_copy
from cdcsync.snapshot.bootstrap import record_start
from cdcsync.snapshot.reads import open_read, wait_passed
from cdcsync.snapshot.replay import BATCH_ROWS, Summary, end_offsets, publish, read_window
from cdcsync.snapshot.replay import consumer as kafka_consumer
from cdcsync.snapshot.table_copy import Plan, ReadAhead
from cdcsync.sources import for_connector, kind_of
from cdcsync.sources.snapshot import SnapshotRead
from cdcsync.sync import reindex_needed
from cdcsync.sync.follower import Follower

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

log = logging.getLogger("cdcsync.bootstrap")

Progress = Callable[[int, int, float], None]


def bootstrap_from_source(
    config: Config,
    follower: FollowerConfig,
    running: Follower,
    spark: SparkSession,
    checkpoint: Path,
    base: Path,
    partitions: int = 2,
    progress: Progress | None = None,
    on_read_open: Callable[[SourceConfig], None] | None = None,
) -> Summary:
    """Build the follower's store from the source; ``on_read_open`` runs once each read is open."""
    if checkpoint.exists() and any(checkpoint.iterdir()):
        raise FatalError(
            f"follower {follower.name} already has a checkpoint at {checkpoint}: it is streaming; "
            "use reindex to rebuild it"
        )
    started = time.monotonic()
    summary = fill_from_source(config, follower, running, spark, partitions, progress, on_read_open)
    publish(running.sink)
    summary.seconds = round(time.monotonic() - started, 2)
    record_start(base, follower.name, summary.offsets, origin="source")
    reindex_needed.remember(config, follower.name, running.mappings.values())  # the shape the new store holds
    return summary


def fill_from_source(
    config: Config,
    follower: FollowerConfig,
    running: Follower,
    spark: SparkSession,
    partitions: int = 2,
    progress: Progress | None = None,
    on_read_open: Callable[[SourceConfig], None] | None = None,
) -> Summary:
    """Steps 1-6 into a staged generation (readers see nothing until ``publish``); ``summary.offsets`` is E2.

    Shared by ``bootstrap --from source`` and ``reindex --from source``.
    """
    summary, started = Summary(follower.name), time.monotonic()
    connect = ConnectClient(config.connect.url)
    consumer = kafka_consumer(config, f"bootstrap-{follower.name}")
    tick = _Ticker(summary, started, progress)
    running.sink.stage(list(running.mappings.values()))  # readers see nothing until publish
    try:
        for source, plans in _plans(config, follower, running):
            _bootstrap_source(config, spark, source, plans, running, consumer, connect, partitions, tick, on_read_open)
    finally:
        consumer.close()
    return summary


def _bootstrap_source(
    config: Config,
    spark: SparkSession,
    source: SourceConfig,
    plans: list[Plan],
    follower: Follower,
    consumer: Consumer,
    connect: ConnectClient,
    partitions: int,
    tick: _Ticker,
    on_read_open: Callable[[SourceConfig], None] | None,
) -> None:
    first = end_offsets(consumer, [p.topic for p in plans])
    read = open_read(source)
    try:
        reader = ThreadPoolExecutor(max_workers=max(1, partitions), thread_name_prefix="cdcsync-bootstrap-read")
        with reader, ExitStack() as stack:
            if on_read_open:
                on_read_open(source)
            for plan in plans:
                plan.rows = read.count(kind_of(source).qualified(plan.table))
            tick.total += sum(p.rows for p in plans)
            processes = stack.enter_context(_processes(config, follower, plans))
            # The first table's reads start now: the read's snapshot is fixed, and a Postgres read waits below
            # for the connector to pass it (up to Connect's offset flush interval) before the first row is mapped.

            def table_reads(plan: Plan) -> ReadAhead:
                return ReadAhead(reader, jdbc.pieces(spark, source, plan.table, plan.mapping, read), partitions)

            first_reads = table_reads(plans[0])
            window, last, row_version = _align(read, source, plans, follower, consumer, connect, first)
            for plan in plans:
                reads = first_reads if plan is plans[0] else table_reads(plan)
                versioned = ((piece, read.versions_of(piece, row_version)) for piece in reads)
                if processes and parallel.shares(follower, plan.rows):
                    table_copy.copy_in_processes(source.name, plan, versioned, processes, tick.next_batch, tick.add)
                else:
                    table_copy.copy_here(source.name, plan, versioned, follower, tick.next_batch, tick.add)
        if not read.one_snapshot:  # aligned after its rows: each carries the position it was read at
            wait_passed(read, connect)
            last = end_offsets(consumer, [p.topic for p in plans])
            window = _read_window(consumer, first, last)
    finally:
        read.close()
    tick.total += len(window)
    for start in range(0, len(window), BATCH_ROWS):
        tick.add(follower.process(tick.next_batch(), window[start : start + BATCH_ROWS]))
    for tp, (_low, high) in last.items():
        tick.summary.offsets.setdefault(tp.topic, {})[str(tp.partition)] = high


@contextmanager
def _processes(config: Config, follower: Follower, plans: list[Plan]) -> Iterator[parallel.Processes | None]:
    """Processes to map and write the source's large tables (``snapshot.parallel``), if it has any.

    They start now (~1 s each), while a Postgres read waits for the
    connector to pass its snapshot, so that they are ready for the first piece.
    """
    if not any(parallel.shares(follower, p.rows) for p in plans):
        yield None
        return
    with parallel.Processes(config, follower, parallel.PROCESSES) as processes:
        processes.warm()
        yield processes


def _align(
    read: SnapshotRead,
    source: SourceConfig,
    plans: list[Plan],
    follower: Follower,
    consumer: Consumer,
    connect: ConnectClient,
    first: dict[TopicPartition, tuple[int, int]],
) -> tuple[list[Record], dict[TopicPartition, tuple[int, int]], int]:
    """A read of one snapshot: its window of unreflected changes, its end E2 and the version of its rows (step 3).

    A read of several snapshots (MariaDB's) is aligned after its rows (each carries its own position): nothing here.
    """
    if not read.one_snapshot:
        return [], {}, 0
    wait_passed(read, connect)
    last = end_offsets(consumer, [p.topic for p in plans])
    window = _read_window(consumer, first, last, lookback=20)
    window, row_version = _split_reflected(read, window, follower)
    log.info("%s unreflected=%d row_version=%d", read.describe(), len(window), row_version)
    return window, last, row_version


def _plans(config: Config, follower: FollowerConfig, running: Follower) -> list[tuple[SourceConfig, list[Plan]]]:
    """The follower's tables grouped by source, in config order."""
    plans: dict[str, tuple[SourceConfig, list[Plan]]] = {}
    for source, table in config.followed_tables(follower):
        topic = source.topic(table)
        if topic in running.mappings:
            plans.setdefault(source.name, (source, []))[1].append(Plan(table, topic, running.mappings[topic]))
    if not plans:
        raise FatalError(f"follower {follower.name}: no table to bootstrap")
    return list(plans.values())


def _split_reflected(read: SnapshotRead, window: list[Record], follower: Follower) -> tuple[list[Record], int]:
    """Drop the window's changes the snapshot reflects; return the rest and the highest reflected version."""
    kept, highest = [], 0
    for record in window:
        txid = _txid(record)
        if txid is not None and read.reflects(txid):
            try:
                change = parse_record(
                    record.topic,
                    record.partition,
                    record.offset,
                    record.key,
                    record.value,
                    snapshot_lsn=follower.snapshot_lsn,
                )
            except PoisonRecord:
                change = None
            if change is not None:
                highest = max(highest, change.version)
            continue
        kept.append(record)  # unreflected, a tombstone, or poison (the follower dead-letters it)
    return kept, highest


def _txid(record: Record) -> int | None:
    """The transaction of a record's change, as its connector reports it (``Changes.transaction``)."""
    if record.value is None:
        return None
    try:
        block = orjson.loads(record.value).get("source", {})
        kind = for_connector(block.get("connector"))
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return kind.changes.transaction(block) if kind is not None else None


def _read_window(
    consumer: Consumer,
    first: dict[TopicPartition, tuple[int, int]],
    last: dict[TopicPartition, tuple[int, int]],
    lookback: int = 0,
) -> list[Record]:
    """Every record from E1 (less ``lookback``) up to E2, in offset order per partition."""
    starts = {tp: max(first[tp][0], first[tp][1] - lookback) for tp in last}
    ends = {tp: end for tp, (_low, end) in last.items()}
    return [record for batch in read_window(consumer, starts, ends, timeout_s=300) for record in batch]


class _Ticker:
    """Counts and progress across every source and table of one bootstrap."""

    def __init__(self, summary: Summary, started: float, progress: Progress | None) -> None:
        self.summary, self.started, self.progress = summary, started, progress
        self.total, self.batches = 0, 0

    def next_batch(self) -> int:
        self.batches += 1
        return self.batches - 1

    def add(self, counts: Any) -> None:
        self.summary.add(counts)
        if self.progress:
            self.progress(self.summary.records, max(self.total, self.summary.records), time.monotonic() - self.started)
