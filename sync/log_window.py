"""A window of the change log, read by offsets: each partition from a start up to an end, then no further.

Two readers share it: a driver-side batch of a follower (``sync.batch_reader``)
and a bootstrap's or reindex's replay (``snapshot.replay.read_window``). The
consumer is the caller's, assigned here and never committed; the caller owns
the position.

A partition is done when the consumer's position reaches its end, not when a
record at ``end - 1`` arrives: compaction may have removed that record, and
the last offsets of a partition may hold a transaction's marker rather than a
record. ``consume()`` is asked for as many records as offsets are left, so a
window of a few records returns once it has them rather than after the whole
timeout (compaction gaps make that count an upper bound; the position ends
those).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from cdcsync.errors import RetryableError
from cdcsync.events import Record

Where = tuple[str, int]  # topic, partition
Span = tuple[int, int]  # first offset (negative: the partition's earliest), end offset (excluded)


def records(
    consumer: Consumer,
    spans: dict[Where, Span],
    each_round: Callable[[dict[Where, Span]], None],
    strict: bool,
    most: int = 500,
) -> Iterator[Record]:
    """Every record of each partition in ``spans``, in offset order per partition; nothing at or past its end.

    ``each_round(pending)`` runs after every ``consume()`` round with the
    partitions not done yet, and may raise to stop the read (a deadline, a
    cancel, a silence). ``strict``: an error the consumer reports for a
    partition (other than reaching its end) fails the read, naming it (a
    batch is retried whole); otherwise it is left to librdkafka, which retries
    it, and to ``each_round`` (a long replay outlives a broker's blip).
    """
    pending = {where: span for where, span in spans.items() if span[1] > max(span[0], 0)}
    if not pending:
        return
    consumer.assign(
        [TopicPartition(t, p, o if o >= 0 else OFFSET_BEGINNING) for (t, p), (o, _) in sorted(pending.items())]
    )
    left = {where: end - max(start, 0) for where, (start, end) in pending.items()}
    while pending:
        for msg in consumer.consume(max(1, min(most, sum(left.values()))), timeout=0.5):
            where = (msg.topic(), msg.partition())
            error = msg.error()
            if error is not None:
                if strict and error.code() != KafkaError._PARTITION_EOF and where in pending:
                    raise RetryableError(f"reading {where[0]}[{where[1]}]: {error}")
                continue
            if where not in pending or msg.offset() >= pending[where][1]:
                continue
            left[where] = pending[where][1] - msg.offset() - 1
            yield Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
        for tp in consumer.position([TopicPartition(t, p) for t, p in pending]):
            where = (tp.topic, tp.partition)
            if tp.offset >= pending[where][1]:
                del pending[where]
                left.pop(where, None)
                consumer.pause([TopicPartition(*where)])
        each_round(pending)
