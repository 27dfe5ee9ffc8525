"""A follower applies one micro-batch of Kafka records to its sink, effectively once.

Per batch, in this order (the order is what makes a crash safe):

1. parse each record into a ``Change`` (tombstones are skipped: the ``op=d``
   event before them already deleted the row), map it for the sink;
   a record that cannot be parsed or mapped is dead-lettered;
2. keep the last change per key (highest version);
3. write to the sink, retrying the whole batch on ``RetryableError`` (the apply
   rule makes a repeated write a no-op); rows the sink rejects are dead-lettered;
4. flush the dead-letter producer;
5. return, and only then does Spark record the batch's offsets in the
   checkpoint. A crash anywhere before replays the batch.

The batch's counts always add up, and are logged as one line:
``consumed = applied + older + tombstones + dead_lettered``, where ``older``
counts changes the sink already held at the same or a newer version plus those
superseded by a newer change of the same key in the batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from confluent_kafka import Producer

from cdcsync import metrics
from cdcsync.errors import FatalError, RetryableError
from cdcsync.events import Change, PoisonRecord, last_per_key, parse_record
from cdcsync.sync.mapping import TableMapping, map_row
from cdcsync.sync.sink import Row, Sink

log = logging.getLogger("cdcsync.follower")


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class BatchCounts:
    consumed: int = 0
    applied: int = 0
    older: int = 0
    tombstones: int = 0
    dead_lettered: int = 0

    def adds_up(self) -> bool:
        return self.consumed == self.applied + self.older + self.tombstones + self.dead_lettered


def snapshot_record(change: Change, doc: Any = None) -> Record:
    """A row read from the source, as the record a dead letter carries (no Kafka coordinates)."""
    value = orjson.dumps({"after": doc}, default=str) if doc is not None else None
    return Record(change.topic, -1, -1, orjson.dumps(change.key, default=str), value)


class DeadLetters:
    """Poison records, with the reason and the source coordinates in headers."""

    def __init__(self, bootstrap_servers: str, topic: str, follower: str) -> None:
        self.topic, self.follower = topic, follower
        self._producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "linger.ms": 5})
        self._errors: list[str] = []

    def send(self, record: Record, stage: str, reason: str) -> None:
        headers = [
            ("cdcsync.error", reason.encode()),
            ("cdcsync.stage", stage.encode()),
            ("cdcsync.follower", self.follower.encode()),
            ("cdcsync.topic", record.topic.encode()),
            ("cdcsync.partition", str(record.partition).encode()),
            ("cdcsync.offset", str(record.offset).encode()),
        ]
        self._producer.produce(
            self.topic, key=record.key, value=record.value, headers=headers, on_delivery=self._delivered
        )

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def flush(self, timeout: float = 60) -> None:
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            errors, self._errors = self._errors, []
            raise RetryableError(f"dead-letter topic {self.topic}: {remaining} undelivered, errors: {errors[:3]}")


class Follower:
    def __init__(
        self,
        name: str,
        sink: Sink,
        mappings: Mapping[str, TableMapping],
        dead_letters: DeadLetters,
        max_attempts: int = 8,
    ) -> None:
        self.name, self.sink, self.mappings, self.dead_letters = name, sink, mappings, dead_letters
        self.max_attempts = max_attempts

    def process(self, batch_id: int, records: Iterable[Record]) -> BatchCounts:
        started = time.monotonic()
        counts = BatchCounts()
        rows: list[Row] = []
        origin: dict[tuple[str, int, int], Record] = {}
        for record in records:
            counts.consumed += 1
            try:
                change = parse_record(record.topic, record.partition, record.offset, record.key, record.value)
                if change is None:
                    counts.tombstones += 1
                    continue
                mapping = self.mappings.get(record.topic)
                if mapping is None:
                    raise PoisonRecord(f"topic {record.topic} has no mapping in follower {self.name}")
                rows.append(map_row(change, mapping))
                origin[(record.topic, record.partition, record.offset)] = record
            except PoisonRecord as err:
                counts.dead_lettered += 1
                self.dead_letters.send(record, "parse", str(err))
        latest = self._last_per_key(rows)
        counts.older += len(rows) - len(latest)
        return self._apply(batch_id, counts, latest, lambda c: origin[(c.topic, c.partition, c.offset)], started)

    def apply_rows(self, batch_id: int, rows: list[Row], failed: Sequence[tuple[Record, str]] = ()) -> BatchCounts:
        """Write rows read from the source itself (``bootstrap --from source``), one per key.

        ``failed`` are source rows that could not be mapped: they go to the dead
        letters like poison records, with ``-1`` as partition and offset.
        """
        started = time.monotonic()
        counts = BatchCounts(consumed=len(rows) + len(failed))
        for record, reason in failed:
            counts.dead_lettered += 1
            self.dead_letters.send(record, "snapshot", reason)
        docs = {id(r.change): r.doc for r in rows}
        return self._apply(batch_id, counts, rows, lambda c: snapshot_record(c, docs.get(id(c))), started)

    def _apply(
        self,
        batch_id: int,
        counts: BatchCounts,
        latest: list[Row],
        record_of: Callable[[Change], Record],
        started: float,
    ) -> BatchCounts:
        result = self._write(batch_id, latest)
        counts.applied += result.applied
        counts.older += result.stale
        for row, reason in result.rejected:
            counts.dead_lettered += 1
            self.dead_letters.send(record_of(row.change), "sink", reason)
        self.dead_letters.flush()
        elapsed = time.monotonic() - started
        metrics.record_batch(self.name, latest, result, counts.dead_lettered, elapsed)
        log.info(
            "follower=%s batch=%d consumed=%d applied=%d older=%d tombstones=%d dead_lettered=%d ms=%.0f",
            self.name,
            batch_id,
            counts.consumed,
            counts.applied,
            counts.older,
            counts.tombstones,
            counts.dead_lettered,
            elapsed * 1000,
        )
        if not counts.adds_up():
            raise FatalError(f"follower {self.name} batch {batch_id}: counts do not add up: {counts}")
        return counts

    @staticmethod
    def _last_per_key(rows: Sequence[Row]) -> list[Row]:
        by_change = {id(r.change): r for r in rows}
        return [by_change[id(c)] for c in last_per_key([r.change for r in rows])]

    def _write(self, batch_id: int, rows: list[Row]) -> Any:
        delay = 0.5
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self.sink.write(batch_id, rows)
            except RetryableError as err:
                if attempt == self.max_attempts:
                    raise FatalError(f"follower {self.name}: giving up after {attempt} attempts: {err}") from err
                delay = min(max(delay * 2, err.retry_after), 30)
                log.warning(
                    "follower=%s batch=%d attempt=%d retry_in_s=%.1f error=%s", self.name, batch_id, attempt, delay, err
                )
                time.sleep(delay)
        raise AssertionError("unreachable")
