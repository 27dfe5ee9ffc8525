"""The replay engine a bootstrap and a reindex share: a stretch of the topics applied through a follower.

``capture`` takes the end offsets to stop at; ``replay`` reads each
partition's records from a start offset up to them (``read_window``, a plain
consumer that never commits nor joins a group) and hands them to the
follower's own batch path (parse, dead letters, last per key, versioned
writes) in calls of ``BATCH_ROWS`` or, for a sink that writes in chunks,
``REPLAY_CALL_RECORDS`` records; a long stretch into an order-free sink may
go to several processes (``snapshot.parallel``), in slices of
``SLICE_RECORDS`` offsets of one partition. ``publish`` then shows the
staged generation, retried on a retryable failure. ``Summary`` counts what was
done; ``ProgressBar`` shows it as it goes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from cdcsync import kafka
from cdcsync.config import Config
from cdcsync.errors import FatalError, RetryableError
from cdcsync.events import Record
from cdcsync.retry import doubling_honouring_retry_after
from cdcsync.snapshot import parallel
from cdcsync.sync import log_window
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.sink import Sink

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

BATCH_ROWS = 5000  # records per follower.process call of a bootstrap (the sink writes them in its own chunks)
# Records per follower.process call of a replay into a sink that writes in chunks (Elasticsearch, Redis): the call
# ends only once its last chunks are written, so each call leaves the sink idle while the next records are read and
# parsed. Memory is the chunks in flight and one read_window list, whatever this is (docs/performance.md,
# "Bootstrap from the topics").
REPLAY_CALL_RECORDS = 50_000
SLICE_RECORDS = 100_000  # offsets per slice in several processes: progress per slice, the work spread evenly
Offsets = dict[TopicPartition, int]
Slice = tuple[str, int, int, int]  # topic, partition, first offset, end offset (excluded)
Progress = Callable[[int, int, float], None]


@dataclass
class Summary:
    follower: str
    records: int = 0
    applied: int = 0
    older: int = 0
    tombstones: int = 0
    dead_lettered: int = 0
    seconds: float = 0.0
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    batches: int = 0  # batch ids given to Follower.process so far

    def add(self, counts: BatchCounts) -> None:
        self.records += counts.records
        self.applied += counts.applied
        self.older += counts.older
        self.tombstones += counts.tombstones
        self.dead_lettered += counts.dead_lettered
        self.batches += 1


def consumer(config: Config, purpose: str) -> Consumer:
    """A plain consumer that only reads assigned partitions: it never commits, nor joins the follower's group."""
    return kafka.consumer(
        {
            **config.kafka.client_config(),
            "group.id": f"cdcsync-{purpose}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )


def end_offsets(consumer: Consumer, topics: list[str]) -> dict[TopicPartition, tuple[int, int]]:
    """(low, high) watermarks of every partition of every topic, captured now."""
    metadata = consumer.list_topics(timeout=30).topics
    marks = {}
    for topic in topics:
        if topic not in metadata:
            raise FatalError(f"topic {topic} does not exist; apply the connectors first (cdcsync connectors apply)")
        for partition in metadata[topic].partitions:
            tp = TopicPartition(topic, partition)
            marks[tp] = consumer.get_watermark_offsets(tp, timeout=30)
    return marks


def capture(config: Config, topics: list[str]) -> dict[TopicPartition, tuple[int, int]]:
    """``end_offsets`` with a consumer of its own."""
    probe = consumer(config, "offsets")
    try:
        return end_offsets(probe, topics)
    finally:
        probe.close()


def offsets_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """``{topic: {partition: offset}}``, the shape of the start file and of Spark's ``startingOffsets``."""
    out: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items(), key=lambda item: (item[0].topic, item[0].partition)):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return out


def read_window(
    reader: Consumer,
    starts: Offsets,
    ends: Offsets,
    batch_rows: int | None = None,
    timeout_s: float | None = None,
) -> Iterator[list[Record]]:
    """Every record of each partition in ``ends`` from ``starts`` (default 0) up to, not including, its end.

    Yields them in lists of about ``batch_rows`` (default ``BATCH_ROWS``), in
    offset order per partition; a record at or past its partition's end
    belongs to the stream and is left out; a partition is done when the
    consumer's position reaches its end (``sync.log_window``). Nothing is
    committed to Kafka: the caller owns the position. ``timeout_s``: give up
    with ``FatalError`` naming the partitions still pending.
    """
    size = batch_rows or BATCH_ROWS
    spans = {(tp.topic, tp.partition): (starts.get(tp, 0), end) for tp, end in ends.items()}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def each_round(pending: dict[log_window.Where, log_window.Span]) -> None:
        if deadline is not None and pending and time.monotonic() > deadline:
            raise FatalError(
                f"reading the change log window timed out after {timeout_s:.0f}s; "
                f"still pending: {sorted(f'{topic}[{partition}]' for topic, partition in pending)}"
            )

    batch: list[Record] = []
    try:
        for record in log_window.records(reader, spans, each_round, strict=False, most=1000):
            batch.append(record)
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch
    finally:
        # A caller that stops half-way may close the consumer before it lets go of this generator.
        with contextlib.suppress(RuntimeError):  # confluent_kafka: "Consumer closed"
            reader.unassign()


def replay(
    config: Config,
    follower: Follower,
    starts: Offsets,
    ends: Offsets,
    summary: Summary,
    progress: Progress | None = None,
) -> None:
    """Apply every record of each partition in ``ends`` from ``starts`` up to its end (``read_window``).

    A long stretch into Elasticsearch or Redis goes to several processes
    (``snapshot.parallel``). Otherwise records go through ``follower.process``: REPLAY_CALL_RECORDS per call
    into a sink that writes in chunks, whose writes then overlap with reading
    and parsing the next ones; BATCH_ROWS per call into one that writes a
    call whole (Delta: one MERGE, held in memory). ``summary`` accumulates
    the counts. ``progress`` gets (records done, records in range, seconds)
    after each list of records read.
    """
    started, done = time.monotonic(), 0
    total = sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items())
    per_call = REPLAY_CALL_RECORDS if follower.sink.chunk_rows else BATCH_ROWS

    def handed(count: int) -> None:
        nonlocal done
        done += count
        if progress:
            progress(done, total, time.monotonic() - started)

    if shared(follower, starts, ends):
        replay_shared(config, follower, starts, ends, summary, handed)
        return
    for counts in replay_here(config, follower, starts, ends, per_call, handed, first_batch=summary.batches):
        summary.add(counts)


def replay_here(
    config: Config,
    follower: Follower,
    starts: Offsets,
    ends: Offsets,
    per_call: int,
    handed: Callable[[int], None],
    first_batch: int = 0,
) -> Iterator[BatchCounts]:
    """The stretch's records through ``follower.process`` in this process, ``per_call`` a call: each call's counts."""
    reader = consumer(config, f"replay-{follower.name}")
    try:
        for batch, records in enumerate(runs(read_window(reader, starts, ends), per_call, handed), first_batch):
            yield follower.process(batch, records)
    finally:
        reader.close()


def runs(lists: Iterable[list[Record]], size: int, handed: Callable[[int], None]) -> Iterator[Iterator[Record]]:
    """The records of ``lists`` as consecutive runs of whole lists, each ``size`` records or just past it.

    Each run is read lazily from ``lists`` as it is consumed, and must be
    consumed to its end before the next is taken (``follower.process`` does).
    ``handed(n)`` is called once each list's ``n`` records have been taken.
    """
    source = iter(lists)
    pending = next(source, None)

    def run() -> Iterator[Record]:
        nonlocal pending
        taken = 0
        while pending is not None and taken < size:
            current, pending = pending, None
            yield from current
            taken += len(current)
            handed(len(current))
            pending = next(source, None)

    while pending is not None:
        yield run()


def publish(sink: Sink, attempts: int = 6) -> None:
    """``sink.publish()``, retried on a retryable failure (a Delta commit conflict with a running follower).

    Waits 2, 4, 8 ... s between tries (at least what the error asks, at most
    30 s); the last try's error is raised as it is.
    """
    policy = Retrying(
        retry=retry_if_exception_type(RetryableError),
        stop=stop_after_attempt(attempts),
        wait=doubling_honouring_retry_after(base=1.0, cap=30),
        reraise=True,
    )
    policy(sink.publish)


def progress_text(done: int, total: int, elapsed: float) -> str:
    """Records done of all, the share, rows/s and the ETA."""
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else 0.0
    pct = 100.0 * done / total if total else 100.0
    return f"{done:,}/{total:,} records ({pct:5.1f}%)  {rate:,.0f}/s  ETA {eta:,.0f}s"


def progress_bar(done: int, total: int, elapsed: float, label: str = "bootstrap") -> None:
    """One plain line on stderr per call: rows, rows/s and ETA (what a log or CI gets from ``ProgressBar``)."""
    print(f"{label}: {progress_text(done, total, elapsed)}", file=sys.stderr, flush=True)


class ProgressBar:
    """A ``Progress`` callback for the command line: a bar on a terminal, plain lines elsewhere.

    On a terminal (stderr is one) rich draws the bar and ``progress_text`` in
    place; anywhere else each call writes ``progress_bar``'s line, so a log or
    CI keeps every figure. Used as a context manager: leaving it ends the bar
    (and gives the terminal its cursor back) however the operation ends.
    rich is imported only for a terminal.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._bar: RichProgress | None = None  # once drawn
        self._task: TaskID | None = None
        self._lock = threading.Lock()  # a source bootstrap reports from its writer threads

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    def __call__(self, done: int, total: int, elapsed: float) -> None:
        if not sys.stderr.isatty():
            progress_bar(done, total, elapsed, self.label)
            return
        with self._lock:
            if self._bar is None or self._task is None:
                self._bar, self._task = self._draw(total)
            self._bar.update(self._task, completed=done, total=total, text=progress_text(done, total, elapsed))

    def _draw(self, total: int) -> tuple[RichProgress, TaskID]:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        bar = Progress(
            TextColumn("{task.description}:", markup=False),
            BarColumn(),
            TextColumn("{task.fields[text]}", markup=False),
            console=Console(stderr=True, force_terminal=True),
        )
        task = bar.add_task(self.label, total=total, text="")
        bar.start()
        return bar, task


def as_json(summary: Summary) -> dict[str, Any]:
    return {**summary.__dict__}


# ------------------------------------------------------------------ in several processes


def shared(follower: Follower, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> bool:
    """Whether this stretch goes to several processes: a sink that can share its fill, and enough records."""
    return parallel.shares(follower, sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items()))


def slices(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], most: int, ways: int) -> list[Slice]:
    """Each partition's offsets from its start up to its end, in offset order, in pieces of at most ``most``.

    The pieces are of one size, in a number that ``ways`` processes share
    evenly: a last piece alone in one process while the others wait cost a
    third of a two-process replay of 300k records.
    """
    records = sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items())
    count = ways * max(1, -(-records // (ways * max(1, most))))
    size = max(1, -(-records // count))
    out: list[Slice] = []
    for tp, end in ends.items():
        for low in range(starts.get(tp, 0), end, size):
            out.append((tp.topic, tp.partition, low, min(end, low + size)))
    return out


def replay_shared(
    config: Config,
    follower: Follower,
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    summary: Summary,
    handed: Callable[[int], None],
) -> None:
    """Apply every record of the stretch in ``parallel.PROCESSES`` processes, slice by slice; ``summary`` adds up."""
    pieces = slices(starts, ends, SLICE_RECORDS, parallel.PROCESSES)
    learned: dict[str, tuple[int, TableMapping]] = {}  # topic -> (start of the slice that saw it, its shape)
    with parallel.Processes(config, follower, len(pieces)) as processes:
        for future in as_completed([processes.submit(_apply_slice, piece) for piece in pieces]):
            piece, counts, mapping = processes.result(future)
            summary.add(counts)
            handed(counts.records)
            topic, start = piece[0], piece[2]
            if mapping != follower.mappings[topic] and start >= learned.get(topic, (-1, mapping))[0]:
                learned[topic] = (start, mapping)
    for topic, (_start_offset, mapping) in learned.items():  # the store has it already: the processes told it
        follower.mappings[topic] = mapping


def _apply_slice(setup: parallel.Setup, piece: Slice) -> tuple[Slice, BatchCounts, TableMapping]:
    """In a process of ``snapshot.parallel``: one slice through its follower, as ``replay_here`` applies a stretch."""
    topic, partition, start, end = piece
    follower = parallel.follower_of(setup)
    where, total = TopicPartition(topic, partition), BatchCounts()
    for counts in replay_here(setup.config, follower, {where: start}, {where: end}, REPLAY_CALL_RECORDS, print_nothing):
        total = total.merge(counts)
    return piece, total, follower.mappings[topic]


def print_nothing(records: int) -> None:
    """A slice's progress: the caller shows it per slice, from the counts."""
