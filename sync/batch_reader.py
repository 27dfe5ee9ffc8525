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

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from cdcsync import kafka
from cdcsync.config import Config
from cdcsync.errors import RetryableError
from cdcsync.events import Record
from cdcsync.sync import deadline
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
    wanted = {
        (topic, partition): (offset, end[topic][partition])
        for topic, parts in start.items()
        for partition, offset in parts.items()
        if end[topic][partition] > max(offset, 0)
    }
    if not wanted:
        return
    consumer = kafka.consumer(
        {
            **config.kafka.client_config(),
            "group.id": f"cdcsync-batch-{follower}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",  # a start the log no longer holds (failOnDataLoss=false, as the query)
            "queued.max.messages.kbytes": QUEUE_KIB,
        }
    )
    try:
        consumer.assign(
            [TopicPartition(t, p, o if o >= 0 else OFFSET_BEGINNING) for (t, p), (o, _e) in sorted(wanted.items())]
        )
        heard = {where: time.monotonic() for where in wanted}
        # The offsets still to read: consume() returns once it has that many, not after its whole timeout (which
        # every batch of a few records waited out). Compaction gaps make it an upper bound; the position ends those.
        left = {where: e - max(o, 0) for where, (o, e) in wanted.items()}
        while wanted:
            if deadline.current(follower) != batch_id:
                raise Cancelled(f"follower {follower}: batch {batch_id} was cancelled while reading its records")
            done: list[tuple[str, int]] = []
            for msg in consumer.consume(max(1, min(500, sum(left.values()))), timeout=0.5):
                where = (msg.topic(), msg.partition())
                if where not in wanted:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RetryableError(f"follower {follower}: reading {where[0]}[{where[1]}]: {error}")
                    continue
                heard[where] = time.monotonic()
                left[where] = wanted[where][1] - msg.offset() - 1
                if msg.offset() < wanted[where][1]:
                    yield Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
                if msg.offset() >= wanted[where][1] - 1:
                    done.append(where)
            deadline.progress(follower)
            # The last offsets before a partition's end may hold no record (a transaction's marker): its position tells.
            for tp in consumer.position([TopicPartition(t, p) for t, p in wanted]):
                if tp.offset >= wanted[(tp.topic, tp.partition)][1]:
                    done.append((tp.topic, tp.partition))
            for where in set(done):
                wanted.pop(where, None)
                left.pop(where, None)
                consumer.pause([TopicPartition(*where)])
            silent = [w for w in wanted if time.monotonic() - heard[w] > silent_s]
            if silent:
                topic, partition = silent[0]
                raise RetryableError(
                    f"follower {follower}: no record of {topic}[{partition}] for {silent_s:.0f} s, before offset "
                    f"{wanted[silent[0]][1]} (batch {batch_id}'s end); is the broker up?"
                )
    finally:
        consumer.close()


def replay(config: Config, follower: Follower, batch_id: int) -> Callable[[Positions, Positions], BatchCounts]:
    """Apply a range of the log on the driver, as batch ``batch_id`` (a held table's retry: ``sync.held``)."""

    def apply(start: Positions, end: Positions) -> BatchCounts:
        return follower.process(batch_id, read_span(config, follower.name, batch_id, start, end))

    return apply
