"""A follower applies one micro-batch of Kafka records to its sink, effectively once.

Per batch, in this order (the order is what makes a crash safe):

1. parse each record into a ``Change`` (tombstones are skipped: the ``op=d``
   event before them already deleted the row), map it for the sink;
   a record that cannot be parsed or mapped is dead-lettered;
2. keep the last change per key (highest version) in each chunk of
   ``sink.chunk_rows`` records (the whole batch for a sink without it), and
   at most ``chunk_bytes`` of records' bytes whatever the sink: a batch of
   wide rows is written in several chunks, never held whole; values the log
   cannot carry are read again from the source (``sync.reselect``);
3. write each chunk to the sink while the next one is parsed, chunks in log
   order, retrying a chunk on ``RetryableError`` (the apply rule makes a
   repeated write a no-op); rows the sink rejects are dead-lettered;
4. flush the dead-letter producer;
5. return, and only then does Spark record the batch's offsets in the
   checkpoint. A crash anywhere before replays the batch.

The batch's counts always add up, and are logged as one line:
``records = applied + older + tombstones + dead_lettered + held``, where ``older``
counts changes the sink already held at the same or a newer version plus those
superseded by a newer change of the same key in the batch, and ``held`` those
of a table the sink fails for alone, set aside for its retry (``sync.held``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, NoReturn

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from cdcsync import metrics
from cdcsync.errors import FatalError, RetryableError, TableError
from cdcsync.events import BinlogSeq, PoisonRecord, Record, SnapshotLsn, parse_record
from cdcsync.retry import doubling_honouring_retry_after, raised
from cdcsync.sync import deadline, shape
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.chunks import Chunk, finder, last_per_key, snapshot_record
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.mapping import Row, TableMapping, map_row
from cdcsync.sync.sink import Sink, WriteResult

if TYPE_CHECKING:
    from cdcsync.sync.reselect import Reselect

log = logging.getLogger("cdcsync.follower")


class Follower:
    on_driver = False  # its batches must be applied on the driver, whatever its sink (sync.stream)

    def __init__(
        self,
        name: str,
        sink: Sink,
        mappings: Mapping[str, TableMapping],
        dead_letters: DeadLetters,
        max_attempts: int = 8,
        report: bool = True,
        binlog_seq: BinlogSeq | None = None,
        snapshot_lsn: SnapshotLsn | None = None,
        learn: Callable[[str], TableMapping] | None = None,
        reindex_needed: Callable[[TableMapping, str], None] | None = None,
        remember: Callable[[Iterable[TableMapping]], None] | None = None,
        writers: int | None = None,
        backfill: Callable[[str, frozenset[str]], str | None] | None = None,
        chunk_bytes: int | None = None,
        reselect: Reselect | None = None,
    ) -> None:
        self.name, self.sink, self.dead_letters = name, sink, dead_letters
        self.mappings = dict(mappings)  # topic -> mapping; a table's entry is replaced when its shape changes
        self.learn = learn  # topic -> its mapping read anew from the catalog (executors: raise ShapeChanged)
        self.reindex_needed = reindex_needed  # (table's mapping, why): rows no change will fix (sync.reindex_needed)
        self.remember = remember  # the shapes its sink holds now, for the next start (sync.reindex_needed.remember)
        self.backfill = backfill  # (topic, columns) -> None once asked, or why not (sync.backfill.request)
        self.binlog_seq = binlog_seq  # MariaDB snapshot rows' binlog positions -> GTID sequences (cdcsync.events)
        self.snapshot_lsn = snapshot_lsn  # where a new Postgres connector's snapshot stands (cdcsync.events)
        self.max_attempts = max_attempts
        self.chunk_bytes = chunk_bytes  # a chunk ends past this many bytes of records (keys and values)
        self.reselect = reselect  # values the log cannot carry, read again from the source (sync.reselect)
        self.report = report  # log and count each batch here; False on executors, whose driver does it
        # Chunks in flight at once (``_apply``): the sink's ``writers``, or its ``fill_writers`` for a follower
        # that fills a staged generation (build_follower's ``fill``).
        self.writers = max(1, sink.writers if writers is None else writers)
        self._writer = ThreadPoolExecutor(self.writers, thread_name_prefix=f"cdcsync-{name}-writer")
        self._retries = threading.Lock()  # counts.retries, changed by the writer threads
        self.lacked: dict[str, frozenset[str]] = {}  # topic -> columns this batch's changes lacked (executors)
        self.failed: dict[str, tuple[str, str]] = {}  # topic -> (reason, fix): tables this batch held (sync.held)
        self.left_out: set[str] = set()  # topics held before this batch, which it leaves out (sync.held)

    def targets(self) -> list[TableMapping]:
        """What the follower writes, as its sink opens or stages each target: its tables' mappings."""
        return list(self.mappings.values())

    def fresh(self) -> None:
        """Start the follower's own state from nothing (a bootstrap of a new follower); a follower of rows has none."""

    def filled(self) -> None:
        """After the last batch of a bootstrap's fill, before the staged store is published."""

    def process(self, batch_id: int, records: Iterable[Record]) -> BatchCounts:
        started = time.monotonic()
        counts = BatchCounts()
        self.lacked = {}
        self.failed = {}
        counts = self._apply(batch_id, counts, self._mapped_chunks(records, counts), started)
        counts.lacking = {topic: sorted(columns) for topic, columns in self.lacked.items()}
        counts.held_tables = {topic: [reason, fix] for topic, (reason, fix) in self.failed.items()}
        return counts

    def _mapped_chunks(self, records: Iterable[Record], counts: BatchCounts) -> Iterator[Chunk]:
        """Parse and map records, ``sink.chunk_rows`` at a time, each chunk reduced to its last change per key.

        A key's changes may fall into two chunks; both are written, in order,
        and the apply rule keeps the newer one. Superseded changes inside a
        chunk count as ``older``.
        """
        rows: list[Row] = []
        mapped: list[Record] = []  # the records behind ``rows``, for the dead letters of rejected rows
        size, most, held = self.sink.chunk_rows, self.chunk_bytes, 0
        for record in records:
            counts.records += 1
            if record.topic in self.failed:  # the sink failed for this table alone: the rest of it waits too
                counts.held += 1
                continue
            held += len(record.key or b"") + len(record.value or b"")
            try:
                change = parse_record(
                    record.topic,
                    record.partition,
                    record.offset,
                    record.key,
                    record.value,
                    self.binlog_seq,
                    self.snapshot_lsn,
                )
                if change is None:
                    counts.tombstones += 1
                    continue
                mapping = self.mappings.get(record.topic)
                if mapping is None:
                    raise PoisonRecord(f"topic {record.topic} has no mapping in follower {self.name}")
                after = change.after
                if after is not None and mapping.include is None and after.keys() != mapping.plan.keys():
                    try:
                        mapping = self._shape(record.topic, mapping, after.keys())
                    except TableError as err:  # the sink refused the table's new shape: held, like a failed write
                        self._hold(record.topic, err, counts)
                        counts.held += 1
                        continue
                rows.append(map_row(change, mapping))
                mapped.append(record)
            except PoisonRecord as err:
                counts.dead_lettered += 1
                self.dead_letters.send(record, "parse", str(err))
            if rows and ((size and len(rows) >= size) or (most and held >= most)):
                yield self._reduced(rows, mapped, counts)
                rows, mapped, held = [], [], 0
        if rows:
            yield self._reduced(rows, mapped, counts)

    def _shape(self, topic: str, mapping: TableMapping, columns: Iterable[str]) -> TableMapping:
        """The mapping for a change whose columns differ from ``mapping``'s: the table's shape read anew."""
        unknown, lacking = shape.differences(mapping, columns)
        if not unknown and not lacking:  # what this follower learned already
            return mapping
        if self.learn is None:  # no catalog to ask (tests, tools): new columns untyped, absent ones allowed
            self.mappings[topic] = shape.untyped(mapping, unknown, lacking)
            return self.mappings[topic]
        return self.relearn(topic, unknown, lacking)

    def relearn(
        self, topic: str, unknown: frozenset[str] = shape.NONE, lacking: frozenset[str] = shape.NONE
    ) -> TableMapping:
        """Read the table's shape from the catalog, tell the sink, and map its changes by it from now on.

        ``unknown`` and ``lacking``: the columns a change brought that the
        mapping did not know, and those it knows that the change lacked. The
        columns the table lost are forgotten by the sink, in every row, before
        any later row is written (docs/schema-changes.md).
        """
        if self.learn is None:
            raise FatalError(f"follower {self.name}: cannot read the catalog here to learn {topic}'s columns")
        old = self.mappings[topic]
        try:
            fresh = self.learn(topic)
        except shape.ShapeChanged:  # an executor: the driver learns, told what the change brought and lacked
            if unknown:
                raise shape.ShapeChanged(topic, unknown, lacking) from None
            # Only lacking: a change older than the catalog (written before an ADD COLUMN) or one after a DROP.
            # Either way the row is written as it is, without the column; the driver asks the catalog after
            # the batch (BatchCounts.lacking), and forgets a dropped column in every row then.
            self.mappings[topic] = shape.untyped(old, shape.NONE, lacking)
            self.lacked[topic] = self.lacked.get(topic, shape.NONE) | lacking
            return self.mappings[topic]
        new, lost = shape.learned(old, fresh, unknown, lacking)
        try:
            self.sink.learn(new)
        except (FatalError, TableError) as err:  # this table's new shape alone (a column the store cannot hold): held
            raise TableError(
                new.target,
                f"sink {self.sink.name} refused table {new.table}'s new columns: {err}",
                "what the reason names (a rename in the follower's mappings, then a restart; or a reindex)",
            ) from err
        if lost:
            self.sink.forget(new.target, sorted(old.field(c) for c in lost))
        self.mappings[topic] = new
        reason = self.backfilled(topic, shape.reindex_reason(old, new, lost), shape.backfilled(old, new, lost))
        if reason and self.reindex_needed is not None:
            self.reindex_needed(new, reason)
        if self.remember is not None:
            self.remember([new])
        added = {c: k for c, k in new.types.items() if c not in old.types}
        metrics.SCHEMA_CHANGES.labels(self.name, new.target).inc()
        log.info("follower=%s table=%s learned_columns=%s dropped_columns=%s", self.name, new.table,
                 added or "none", sorted(lost) or "none")  # fmt: skip
        return new

    def backfilled(self, topic: str, reason: str | None, filled: frozenset[str]) -> str | None:
        """What is left of ``reason`` (rows no change will fix) once the ``filled`` columns are backfilled through
        the log (``sync.backfill``): nothing, or the reason with why no backfill could be asked for."""
        if not reason or not filled or self.backfill is None:
            return reason
        why = self.backfill(topic, filled)
        return None if why is None else f"{reason}; no backfill through the log: {why}"

    def _reduced(self, rows: list[Row], mapped: list[Record], counts: BatchCounts) -> Chunk:
        latest = last_per_key(rows)
        counts.older += len(rows) - len(latest)
        if self.reselect is not None:
            latest = self.reselect(latest, self.mappings)
        return latest, finder(mapped)

    def apply_rows(self, batch_id: int, rows: list[Row], failed: Sequence[tuple[Record, str]] = ()) -> BatchCounts:
        """Write rows read from the source itself (``bootstrap --from source``), one per key.

        ``failed`` are source rows that could not be mapped: they go to the dead
        letters like poison records, with ``-1`` as partition and offset.
        """
        started = time.monotonic()
        counts = BatchCounts(records=len(rows) + len(failed))
        for record, reason in failed:
            counts.dead_lettered += 1
            self.dead_letters.send(record, "snapshot", reason)
        docs = {id(r.change): r.doc for r in rows}
        chunk: Chunk = (rows, lambda c: snapshot_record(c, docs.get(id(c))))
        # Written in the caller's thread: a bootstrap calls this from several threads at once (its writers).
        self._settle(self._write(batch_id, rows, counts), chunk, counts)
        return self._finish(batch_id, counts, started)

    def _apply(self, batch_id: int, counts: BatchCounts, chunks: Iterator[Chunk], started: float) -> BatchCounts:
        """Write chunk after chunk; the writes of up to ``writers`` chunks overlap with parsing the next.

        The sink's server does its work while this thread parses (the client
        waits on the network, outside the GIL). A sink with one writer gets its
        chunks in log order. With more, chunks of a batch may land in any order,
        which only sinks whose apply rule does not depend on the order declare
        (Elasticsearch, Redis: the newest version of a key wins whenever it lands;
        a superseded change that lands after it counts as ``older``). Batches
        never overlap: a batch returns once every chunk is written.
        """
        in_flight: deque[tuple[Future[WriteResult], Chunk]] = deque()
        try:
            for chunk in chunks:
                while len(in_flight) >= self.writers or (in_flight and in_flight[0][0].done()):
                    mark = time.monotonic()
                    future, done = in_flight.popleft()
                    self._settle(future.result(), done, counts)
                    counts.waited_s += time.monotonic() - mark
                in_flight.append((self._writer.submit(self._write_or_hold, batch_id, chunk[0], counts), chunk))
            while in_flight:
                future, done = in_flight.popleft()
                self._settle(future.result(), done, counts)
        except BaseException:
            # A batch that fails (a write's error, an interrupt while reading the next chunk) leaves no write running
            # behind it: one landing later would go into a store the caller may already have dropped or rebuilt.
            for future, _chunk in in_flight:
                future.cancel()
            wait([future for future, _chunk in in_flight])
            raise
        return self._finish(batch_id, counts, started)

    def _finish(self, batch_id: int, counts: BatchCounts, started: float) -> BatchCounts:
        """After a batch's writes: its dead letters acknowledged, the writes shown to readers, counted and logged."""
        self.dead_letters.flush()
        if self.report:
            if counts.applied:
                self.make_visible(counts)
            self.log_batch(batch_id, counts, time.monotonic() - started)
        else:
            self.check(batch_id, counts)
        return counts

    def make_visible(self, counts: BatchCounts) -> None:
        """Have the sink show readers the batch's writes now (Elasticsearch refreshes; the others show them at once)."""
        held = self.left_out | counts.held_tables.keys()  # tables held (sync.held): the sink fails for them
        shown = [m for t, m in self.mappings.items() if t not in held]
        written = [m.target for m in shown if m.table in counts.newest_commit_ms]
        self.sink.make_visible(written or [m.target for m in shown])

    def check(self, batch_id: int, counts: BatchCounts) -> None:
        if not counts.adds_up():
            raise FatalError(f"follower {self.name} batch {batch_id}: counts do not add up: {counts}")

    def log_batch(self, batch_id: int, counts: BatchCounts, elapsed_s: float) -> None:
        """The batch's metrics and its one log line."""
        self.check(batch_id, counts)
        metrics.record_batch(self.name, counts, elapsed_s)
        log.info(
            "follower=%s batch=%d records=%d applied=%d older=%d tombstones=%d dead_lettered=%d ms=%.0f"
            " waited_for_sink_ms=%.0f",
            self.name,
            batch_id,
            counts.records,
            counts.applied,
            counts.older,
            counts.tombstones,
            counts.dead_lettered,
            elapsed_s * 1000,
            counts.waited_s * 1000,
        )

    def _settle(self, result: WriteResult, chunk: Chunk, counts: BatchCounts) -> None:
        rows, record_of = chunk
        deadline.progress(self.name)  # the batch moves (sync.deadline; on an executor, nobody watches)
        counts.count_written(rows, result)
        for row, reason in result.rejected:
            counts.dead_lettered += 1
            self.dead_letters.send(record_of(row.change), "sink", reason)

    def _write_or_hold(self, batch_id: int, rows: list[Row], counts: BatchCounts) -> WriteResult:
        """``_write``; when the sink still fails for one target's rows alone, those are held and the rest written."""
        try:
            return self._write(batch_id, rows, counts)
        except TableError as err:
            topics = [t for t, m in self.mappings.items() if m.target == err.target]
            if not topics:
                raise
            for topic in topics:
                self._hold(topic, err, counts)
            rest = [r for r in rows if r.target != err.target]
            with self._retries:
                counts.held += len(rows) - len(rest)
            return self._write_or_hold(batch_id, rest, counts) if rest else WriteResult()

    def _hold(self, topic: str, err: TableError, counts: BatchCounts) -> None:
        """Set ``topic``'s table aside for the rest of the batch; the batch's caller records it (``sync.held``)."""
        if topic not in self.failed:
            log.error("follower=%s table=%s held for this batch: %s", self.name, self.mappings[topic].table, err)
        self.failed[topic] = (str(err), err.fix)

    def _write(self, batch_id: int, rows: list[Row], counts: BatchCounts) -> WriteResult:
        """``sink.write``, tried up to ``max_attempts`` times while it raises ``RetryableError``.

        Waits 1, 2, 4 ... s between tries (at least what the error asks, at most
        30 s). Each retry is counted and logged as it happens, not at the end of
        a batch that may never end (the sink is down).
        """

        def retrying(state: RetryCallState) -> None:
            with self._retries:
                counts.retries += 1
            if self.report:
                metrics.SINK_RETRIES.labels(self.name).inc()
            log.warning(
                "follower=%s batch=%d attempt=%d retry_in_s=%.1f error=%s",
                self.name,
                batch_id,
                state.attempt_number,
                state.upcoming_sleep,
                raised(state),
            )

        def give_up(state: RetryCallState) -> NoReturn:
            # Still retryable: the batch fails, and the daemon's supervisor restarts the follower later.
            err = raised(state)
            if isinstance(err, TableError):  # one table's alone: held, the others go on (_write_or_hold)
                raise err
            raise RetryableError(
                f"follower {self.name}: sink still failing after {state.attempt_number} attempts: {err}",
                err.retry_after,
            ) from err

        policy = Retrying(
            retry=retry_if_exception_type(RetryableError),
            stop=stop_after_attempt(self.max_attempts),
            wait=doubling_honouring_retry_after(base=0.5, cap=30),
            before_sleep=retrying,
            retry_error_callback=give_up,
        )
        return policy(self.sink.write, batch_id, rows)
