"""``cdcsync bootstrap --from source``: a consistent read of the source database, aligned with the log.

For when the compacted topics do not hold the full state (a connector created
with ``snapshot.mode=no_data``, topics recreated, retention cut). Per source,
in this order (docs/bootstrap.md gives the reasoning):

1. capture the end offsets E1 of the source's followed topics. Everything
   before E1 was emitted before the read began, so the read reflects it;
2. open the read (``snapshot.positions``): an exported Postgres snapshot, or
   per-chunk MariaDB consistent snapshots that report their binlog position;
3. Postgres: wait until the connector has passed the snapshot, capture E2,
   and read the log window [E1, E2): each change is reflected or not by its
   transaction id, and snapshot rows take the highest reflected version;
4. read every table through Spark JDBC in pieces, ``--partitions`` of them at a time,
   and write the rows through the follower's sink with those versions;
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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.connectors.client import ConnectClient
from cdcsync.errors import FatalError
from cdcsync.events import Change, PoisonRecord, parse_record
from cdcsync.snapshot import jdbc, parallel
from cdcsync.snapshot.bootstrap import (
    BATCH_ROWS,
    Summary,
    end_offsets,
    publish,
    read_window,
    record_start,
)
from cdcsync.snapshot.bootstrap import consumer as kafka_consumer
from cdcsync.snapshot.positions import MARIA_FILE, MARIA_POS, PostgresRead, SourceRead, open_read, wait_passed
from cdcsync.sync import rebuild
from cdcsync.sync.follower import BatchCounts, Follower, Record, snapshot_record
from cdcsync.sync.mapping import TableMapping, canonical_doc, convert, doc_id
from cdcsync.sync.sink import Row

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger("cdcsync.bootstrap")

Progress = Callable[[int, int, float], None]


@dataclass
class Plan:
    """One followed table of a source: where to read it and how its rows map."""

    table: TableRef
    topic: str
    mapping: TableMapping
    rows: int = 0  # in the read's snapshot, counted once the read is open


def bootstrap_from_source(
    config: Config,
    cfg: FollowerConfig,
    follower: Follower,
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
            f"follower {cfg.name} already has a checkpoint at {checkpoint}: it is streaming; use reindex to rebuild it"
        )
    started = time.monotonic()
    summary = fill_from_source(config, cfg, follower, spark, partitions, progress, on_read_open)
    publish(follower.sink)
    summary.seconds = round(time.monotonic() - started, 2)
    record_start(base, cfg.name, summary.offsets, origin="source")
    rebuild.remember(config, cfg.name, follower.mappings.values())  # the shape the new store holds
    return summary


def fill_from_source(
    config: Config,
    cfg: FollowerConfig,
    follower: Follower,
    spark: SparkSession,
    partitions: int = 2,
    progress: Progress | None = None,
    on_read_open: Callable[[SourceConfig], None] | None = None,
) -> Summary:
    """Steps 1-6 into a staged store (readers see nothing until ``publish``); ``summary.offsets`` is E2.

    Shared by ``bootstrap --from source`` and ``reindex --from source``.
    """
    summary, started = Summary(cfg.name), time.monotonic()
    connect = ConnectClient(config.connect.url)
    consumer = kafka_consumer(config, f"bootstrap-{cfg.name}")
    tick = _Ticker(summary, started, progress)
    follower.sink.stage(list(follower.mappings.values()))  # readers see nothing until publish
    try:
        for source, plans in _plans(config, cfg, follower):
            _bootstrap_source(config, spark, source, plans, follower, consumer, connect, partitions, tick, on_read_open)
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
                plan.rows = read.count(jdbc.qualified(source, plan.table))
            tick.total += sum(p.rows for p in plans)
            processes = stack.enter_context(_processes(config, follower, plans))
            # The first table's reads start now: the read's snapshot is fixed, and a Postgres read waits below
            # for the connector to pass it (up to Connect's offset flush interval) before the first row is mapped.

            def table_reads(plan: Plan) -> _ReadAhead:
                return _ReadAhead(reader, jdbc.pieces(spark, source, plan.table, plan.mapping, read), partitions)

            first_reads = table_reads(plans[0])
            window, last, row_version = _align(read, source, plans, follower, consumer, connect, first)
            for plan in plans:
                reads = first_reads if plan is plans[0] else table_reads(plan)
                versioned = ((piece, _versions(read, piece, row_version)) for piece in reads)
                if processes and parallel.shares(follower, plan.rows):
                    _copy_in_processes(source.name, plan, versioned, processes, tick)
                else:
                    _copy_table(source.name, plan, versioned, follower, tick)
        if not isinstance(read, PostgresRead):
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
    read: SourceRead,
    source: SourceConfig,
    plans: list[Plan],
    follower: Follower,
    consumer: Consumer,
    connect: ConnectClient,
    first: dict[TopicPartition, tuple[int, int]],
) -> tuple[list[Record], dict[TopicPartition, tuple[int, int]], int]:
    """A Postgres read's window of unreflected changes, its end E2 and the version of its rows (step 3).

    A MariaDB read is aligned after its rows (each carries its own position): nothing here.
    """
    if not isinstance(read, PostgresRead):
        return [], {}, 0
    wait_passed(read, connect)
    last = end_offsets(consumer, [p.topic for p in plans])
    window = _read_window(consumer, first, last, lookback=20)
    window, row_version = _split_reflected(read, window, follower)
    log.info(
        "source=%s snapshot=%s xmin=%d xmax=%d in_progress=%d wal_lsn=%d unreflected=%d row_version=%d",
        source.name,
        read.snapshot_id,
        read.xmin,
        read.xmax,
        len(read.xip),
        read.wal_lsn,
        len(window),
        row_version,
    )
    return window, last, row_version


class _ReadAhead:
    """A table's JDBC pieces, read on the reader threads at most ``depth`` pieces ahead of the one being mapped.

    Submitting every piece at once read the whole table into memory whenever
    the store was slower than the reads.
    """

    def __init__(self, pool: ThreadPoolExecutor, pieces: list[jdbc.Piece], depth: int) -> None:
        self._pool, self._todo, self._depth = pool, deque(pieces), max(1, depth)
        self._running: deque[Future[pa.Table]] = deque()
        self._fill()

    def _fill(self) -> None:
        while self._todo and len(self._running) < self._depth:
            self._running.append(self._pool.submit(self._todo.popleft()))

    def __iter__(self) -> Iterator[pa.Table]:
        while self._running:
            table = self._running.popleft().result()
            self._fill()
            yield table


def _plans(config: Config, cfg: FollowerConfig, follower: Follower) -> list[tuple[SourceConfig, list[Plan]]]:
    """The follower's tables grouped by source, in config order."""
    plans: dict[str, tuple[SourceConfig, list[Plan]]] = {}
    for source, table in config.followed_tables(cfg):
        topic = source.topic(table)
        if topic in follower.mappings:
            plans.setdefault(source.name, (source, []))[1].append(Plan(table, topic, follower.mappings[topic]))
    if not plans:
        raise FatalError(f"follower {cfg.name}: no table to bootstrap")
    return list(plans.values())


def _split_reflected(read: PostgresRead, window: list[Record], follower: Follower) -> tuple[list[Record], int]:
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
    if record.value is None:
        return None
    try:
        txid = orjson.loads(record.value).get("source", {}).get("txId")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return txid if isinstance(txid, int) else None


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


Versions = int | dict[tuple[str, int], int]  # a Postgres read's one row version, or a MariaDB read's per position
Chunk = tuple[list[Row], list[tuple[Record, str]]]  # rows mapped for the sink, and rows that could not be


def _versions(read: SourceRead, piece: pa.Table, row_version: int) -> Versions:
    """The versions of a piece's rows: a Postgres read's one, or one per binlog position a MariaDB chunk read at."""
    if isinstance(read, PostgresRead):
        return row_version
    at = piece.select([MARIA_FILE, MARIA_POS]).group_by([MARIA_FILE, MARIA_POS]).aggregate([])
    positions = zip(at.column(MARIA_FILE).to_pylist(), at.column(MARIA_POS).to_pylist(), strict=True)
    return {(file, int(pos)): read.version(file, int(pos)) for file, pos in positions}


def _copy_table(
    source: str, plan: Plan, reads: Iterable[tuple[pa.Table, Versions]], follower: Follower, tick: _Ticker
) -> None:
    """Stream one table from its JDBC read to the sink in this process, piece after piece.

    The table is read in pieces (key ranges or key hashes), each one JDBC
    query handed to Python as Arrow (``toArrow``: no per-row pickling on
    either side). Up to ``partitions`` pieces are read ahead (``_ReadAhead``) while this
    thread maps the current one, and the follower's ``writers`` threads each write
    a chunk while it maps the next (``_write``): Spark's JDBC reads, this thread
    and the sink's server run side by side instead of taking turns. Pieces and
    chunks hold distinct keys, so their order does not matter.
    """
    chunks = (chunk for piece, versions in reads for chunk in _mapped(source, plan, piece, versions))
    _write(chunks, follower, tick.next_batch, tick.add)


def _copy_in_processes(
    source: str,
    plan: Plan,
    reads: Iterable[tuple[pa.Table, Versions]],
    processes: parallel.Processes,
    tick: _Ticker,
) -> None:
    """Stream one table to a sink that shares its fill, each piece mapped and written in one of ``processes``.

    One process maps every row under one GIL, and left part of the machine
    idle (docs/performance.md, "Bootstrap from the source in several
    processes"). This thread only hands pieces over: at most one per process
    waits beside the ones being written, so the reads ahead stay bounded.
    """
    in_flight: deque[Future[BatchCounts]] = deque()
    for piece, versions in reads:
        in_flight.append(processes.submit(_copy_piece, source, plan, piece, versions, tick.next_batch()))
        while len(in_flight) > parallel.PROCESSES or (in_flight and in_flight[0].done()):
            tick.add(processes.result(in_flight.popleft()))
    for future in in_flight:
        tick.add(processes.result(future))


def _copy_piece(
    setup: parallel.Setup, source: str, plan: Plan, piece: pa.Table, versions: Versions, batch: int
) -> BatchCounts:
    """In a process of ``snapshot.parallel``: one piece through its follower, as ``_copy_table`` writes it."""
    total = BatchCounts()

    def add(counts: BatchCounts) -> None:
        nonlocal total
        total = total.merge(counts)

    follower = parallel.follower_of(setup)
    # Each process writes with the sink's ``writers``, as the daemon's tasks side by side do, not the ``fill_writers``
    # of one process alone: 3 each (6 bulk requests at once) cost Elasticsearch more CPU per row (docs/performance.md).
    _write(_mapped(source, plan, piece, versions), follower, lambda: batch, add, follower.sink.writers)
    return total


def _mapped(source: str, plan: Plan, piece: pa.Table, versions: Versions) -> Iterator[Chunk]:
    """A piece's rows as the sink's rows, BATCH_ROWS at a time, with the rows that could not be mapped."""
    rows: list[Row] = []
    failed: list[tuple[Record, str]] = []
    mapping, keys = plan.mapping, plan.mapping.key_columns
    for data in piece.to_pylist():
        if isinstance(versions, int):
            version = versions
        else:
            version = versions[(data.pop(MARIA_FILE), int(data.pop(MARIA_POS)))]
        key = {c: data[c] for c in keys}
        change = Change(source, mapping.table, "r", key, None, None, version, plan.topic, -1, -1)
        try:
            rows.append(Row(change, mapping.target, doc_id(key, mapping), _doc(data, plan)))
        except PoisonRecord as err:
            failed.append((snapshot_record(change, data), str(err)))
        if len(rows) + len(failed) >= BATCH_ROWS:
            yield rows, failed
            rows, failed = [], []
    if rows or failed:
        yield rows, failed


def _write(
    chunks: Iterable[Chunk],
    follower: Follower,
    next_batch: Callable[[], int],
    add: Callable[[BatchCounts], None],
    writers: int | None = None,
) -> None:
    """Each chunk through ``follower.apply_rows`` on ``writers`` threads, while this thread maps the next.

    ``writers`` defaults to the follower's; ``writers`` + 1 chunks are in memory.
    """
    in_flight: deque[Future[BatchCounts]] = deque()
    writers = writers or follower.writers
    with ThreadPoolExecutor(max_workers=writers, thread_name_prefix="cdcsync-bootstrap-write") as writer:
        for rows, failed in chunks:
            in_flight.append(writer.submit(follower.apply_rows, next_batch(), rows, failed))
            while len(in_flight) > writers or (in_flight and in_flight[0].done()):
                add(in_flight.popleft().result())
        for future in in_flight:
            add(future.result())


def _doc(data: dict[str, Any], plan: Plan) -> dict[str, Any]:
    types = plan.mapping.types
    parsed = {
        c: convert(v, types.get(c)) if isinstance(v, str) and types.get(c) in jdbc.TEXT_KINDS else v
        for c, v in data.items()
    }
    return canonical_doc(parsed, plan.mapping)


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
