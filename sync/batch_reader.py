"""A driver-side batch's records, read from Kafka by the batch's own offsets, never collected whole.

A follower whose sink applies on the driver (Delta) used to collect its
batch into the driver's JVM (``DataFrame.toArrow``). Under ``local[...]`` the
executor is that JVM, and it serializes each task's whole result before
``spark.driver.maxResultSize`` is checked: a backlog of wide rows behind
small ones (a batch sized from a start-up sample of 200-byte rows, then 60 KB
rows) ran the heap out, and an ``OutOfMemoryError`` in a result thread
leaves the collect waiting forever.

So the query still plans each batch and keeps the follower's position (its
checkpoint), but the batch function reads the batch's offset range itself,
with a Kafka consumer in the driver's Python process: Spark writes batch N's
end offsets to ``offsets/N`` before it runs the batch, and its start is batch
N-1's end (or, for the query's first batch, the initial offsets in
``sources/0/0``). A partition new to the checkpoint (a table added to a
running follower) starts from its earliest offset, as Spark's own source
does. Records stream through: the consumer's queue is capped in bytes
(``QUEUE_KIB``), and the follower parses and writes them in chunks capped in
bytes too (``Follower.chunk_bytes``), so memory is bounded by the bytes of
the records actually read, whatever the sample said.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cdcsync import kafka
from cdcsync.config import Config
from cdcsync.errors import RetryableError
from cdcsync.events import Record
from cdcsync.sync import deadline, log_window
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.position import Positions, initial_positions, offsets_of_batch

if TYPE_CHECKING:
    from cdcsync.sync.follower import Follower

QUEUE_KIB = 16 * 1024  # records the consumer fetches ahead of the follower, per process (librdkafka's default: 64 MiB)
SILENT_S = 60.0  # no record from a partition not yet at its end for this long: the batch fails, naming it


class Cancelled(RetryableError):
    """The batch was cancelled (``sync.deadline``) while its records were being read."""


def batch_span(checkpoint: Path, batch_id: int) -> tuple[Positions, Positions]:
    """Where batch ``batch_id`` of the query with this checkpoint starts and ends (each partition's next offset).

    A partition absent from the start is read from its earliest offset (-2).
    """
    end = offsets_of_batch(checkpoint, batch_id)
    if end is None:
        raise RetryableError(f"checkpoint {checkpoint} has no offsets for batch {batch_id}")
    before = offsets_of_batch(checkpoint, batch_id - 1) if batch_id > 0 else None
    start = before if before is not None else initial_positions(checkpoint) or {}
    return {t: {p: start.get(t, {}).get(p, -2) for p in parts} for t, parts in end.items()}, end


def read_span(
    config: Config, follower: str, batch_id: int, start: Positions, end: Positions, silent_s: float = SILENT_S
) -> Iterator[Record]:
    """Every record from ``start`` up to ``end`` (exclusive), in offset order within each partition."""
    spans = {(t, p): (offset, end[t][p]) for t, parts in start.items() for p, offset in parts.items()}
    consumer = kafka.consumer(
        {
            **config.kafka.client_config(),
            "group.id": f"cdcsync-batch-{follower}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",  # a start the log no longer holds (failOnDataLoss=false, as the query)
            "queued.max.messages.kbytes": QUEUE_KIB,
        }
    )
    heard = dict.fromkeys(spans, time.monotonic())

    def each_round(pending: dict[log_window.Where, log_window.Span]) -> None:
        deadline.progress(follower)
        if deadline.current(follower) != batch_id:
            raise Cancelled(f"follower {follower}: batch {batch_id} was cancelled while reading its records")
        silent = [w for w in pending if time.monotonic() - heard[w] > silent_s]
        if silent:
            topic, partition = silent[0]
            raise RetryableError(
                f"follower {follower}: no record of {topic}[{partition}] for {silent_s:.0f} s, before offset "
                f"{pending[silent[0]][1]} (batch {batch_id}'s end); is the broker up?"
            )

    try:
        for record in log_window.records(consumer, spans, each_round, strict=True):
            heard[(record.topic, record.partition)] = time.monotonic()
            yield record
    finally:
        consumer.close()


def replay(config: Config, follower: Follower, batch_id: int) -> Callable[[Positions, Positions], BatchCounts]:
    """Apply a range of the log on the driver, as batch ``batch_id`` (a held table's retry: ``sync.held``)."""

    def apply(start: Positions, end: Positions) -> BatchCounts:
        return follower.process(batch_id, read_span(config, follower.name, batch_id, start, end))

    return apply
