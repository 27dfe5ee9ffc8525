"""How many records one micro-batch may take: bounded by bytes, not only by count.

Spark's Kafka source limits a batch by record count (``maxOffsetsPerTrigger``)
and has no byte limit. A count that suits 200-byte rows is a memory bomb
with 60 KB rows: 20,000 of them are 1.2 GB, which the Delta follower collects
on the driver, and the driver's heap runs out; restarted with the same
backlog, it runs out again (a crash loop seen on this stack).

So when a follower's query starts, it samples the records it is about to read
(from its position, at most ``SAMPLE`` per partition) and takes
``max_batch_bytes / size``, where the size is the 90th percentile of the
sampled records, never more than the configured count and never fewer than
``MIN_RECORDS``. Every restart samples again, so the limit follows the rows as
they change. Arrow batches handed to Python are capped in bytes too
(``spark.sql.execution.arrow.maxBytesPerBatch``, cdcsync.spark).

A sample only sees the records already there: rows that turn wide after the
start (a backlog of 60 KB rows behind small ones) can still make a batch
large. That costs no memory: the delta follower reads its batch in chunks bounded
by the bytes read (``sync.batch_reader``), search and cache apply theirs in
the tasks. A collect into the driver past ``spark.driver.maxResultSize`` (a
quarter of the heap) fails, and the follower's next start takes a quarter of
the records (``shrink``), again if needed, until a batch commits.
"""

from __future__ import annotations

import re
import time

from confluent_kafka import TopicPartition

from cdcsync import kafka
from cdcsync.config import Config

SAMPLE = 200  # records per partition
MIN_RECORDS = 50
TASKS_PER_CORE_BEHIND = 2  # tasks per core of a full batch, locally (task_options)


def records_per_batch(max_batch_bytes: int, sizes: list[int], configured: int) -> int:
    """The record limit for a batch, from sampled record sizes (pure)."""
    if not sizes:
        return configured
    ordered = sorted(sizes)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return max(MIN_RECORDS, min(configured, max_batch_bytes // max(p90, 1)))


# A batch whose results the driver refused (spark.driver.maxResultSize, cdcsync.spark): its follower's next start
# takes a quarter of the records, again after each such failure, until a batch commits (sync.supervisor).
TOO_LARGE = re.compile(r"spark\.driver\.maxResultSize|Total size of serialized results")
_shrunk: dict[str, int] = {}  # follower -> the divisor of its record limit


def shrink(follower: str, error: str) -> bool:
    """Whether ``error`` is a batch too large for the driver; if so, the follower's next batches are smaller."""
    if not TOO_LARGE.search(error):
        return False
    _shrunk[follower] = min(_shrunk.get(follower, 1) * 4, 4096)
    return True


def shrunk(follower: str, per_batch: int) -> int:
    """``per_batch`` as the follower's failures so far allow it."""
    return max(MIN_RECORDS, per_batch // _shrunk.get(follower, 1)) if follower in _shrunk else per_batch


def unshrink(follower: str) -> None:
    _shrunk.pop(follower, None)


def task_options(per_batch: int, cores: int, local: bool) -> dict[str, str]:
    """How Spark's Kafka source splits a batch of an order-free follower into tasks (``sync.executors``).

    At least one task per core (``minPartitions``): a batch of a follower that
    keeps up, a few hundred records, costs each task's fixed start once per
    core. Locally, a full batch (a follower behind) is split further, into
    ``TASKS_PER_CORE_BEHIND`` tasks per core (``maxRecordsPerPartition``): a
    task's time is mostly its Python worker's, one GIL each, and a worker
    waits on its sink's round trips; with one task per core the other waits
    for the slower one. The local master keeps one slot more than that
    (``cdcsync.spark.default_master``), so a follower whose sink hangs in the
    middle of a backlog still leaves a slot to the others. On a cluster a
    batch takes one task per executor core, as before.
    """
    options = {"minPartitions": str(cores)}
    if local:
        split = TASKS_PER_CORE_BEHIND * cores
        options["maxRecordsPerPartition"] = str(max(1, -(-per_batch // split)))
    return options


def sample_sizes(
    config: Config, topics: list[str], positions: dict[str, dict[int, int]], timeout_s: float = 10
) -> list[int]:
    """Sizes (key + value bytes) of up to ``SAMPLE`` records per partition, from each position (else the start)."""
    consumer = kafka.consumer(
        {
            **config.kafka.client_config(),
            "group.id": "cdcsync-batch-sizing",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    sizes: list[int] = []
    try:
        wanted: list[TopicPartition] = []
        ends: dict[tuple[str, int], int] = {}
        metadata = consumer.list_topics(timeout=timeout_s).topics
        for topic in topics:
            for partition in metadata[topic].partitions if topic in metadata else ():
                offset = positions.get(topic, {}).get(partition, -2)
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
                start = max(offset, low) if offset >= 0 else low
                if start < high:
                    wanted.append(TopicPartition(topic, partition, start))
                    ends[(topic, partition)] = min(high, start + SAMPLE)
        if not wanted:
            return sizes
        consumer.assign(wanted)
        taken: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + timeout_s
        while len(taken) < len(ends) or any(taken[k] < ends[k] - 1 for k in taken):
            if time.monotonic() > deadline:
                break
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error():
                    continue
                where = (msg.topic(), msg.partition())
                if msg.offset() >= ends[where]:
                    continue
                taken[where] = msg.offset()
                sizes.append(len(msg.key() or b"") + len(msg.value() or b""))
    finally:
        consumer.close()
    return sizes
