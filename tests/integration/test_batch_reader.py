"""A driver-side batch read from the broker by its own offsets (``sync.batch_reader``), on the real Kafka.

The follower that applies on the driver (Delta) reads each batch's offset
range with its own consumer instead of collecting the batch into the JVM. It
must read exactly that range, partition by partition in offset order, and
end even where the range's last offsets hold no record (a transaction's
commit marker), or the batch would wait for a record that never comes.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from cdcsync import kafka
from cdcsync.sync import deadline
from cdcsync.sync.batch_reader import Cancelled, read_span
from tests.support import ENV, config_for, uid

BOOTSTRAP = f"127.0.0.1:{ENV['KAFKA_PORT']}"


def topic_of(partitions: int) -> str:
    name = f"batch_reader_{uid()}"
    with kafka.admin({"bootstrap.servers": BOOTSTRAP}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def read(topic: str, start: dict[int, int], end: dict[int, int], batch_id: int = 7) -> list[tuple[int, int, bytes]]:
    deadline.begin("reader-test", batch_id, 60)
    try:
        got = read_span(config_for(), "reader-test", batch_id, {topic: start}, {topic: end}, silent_s=20)
        return [(r.partition, r.offset, r.value or b"") for r in got]
    finally:
        deadline.end("reader-test")


def test_exactly_the_batchs_offsets_in_order_from_each_partition() -> None:
    topic = topic_of(2)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    for partition in (0, 1):
        for i in range(20):
            producer.produce(topic, key=b"k", value=f"{partition}:{i}".encode(), partition=partition)
    producer.flush(30)
    got = read(topic, {0: 5, 1: -2}, {0: 12, 1: 4})  # partition 1: new to the checkpoint, from its start
    assert [(p, o) for p, o, _ in got if p == 0] == [(0, o) for o in range(5, 12)]
    assert [(p, o) for p, o, _ in got if p == 1] == [(1, o) for o in range(0, 4)]
    assert all(value == f"{p}:{o}".encode() for p, o, value in got)
    assert read(topic, {0: 12, 1: 4}, {0: 12, 1: 4}) == []


def test_a_range_ending_on_a_transaction_marker_ends() -> None:
    topic = topic_of(1)
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"reader-{uid()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=str(i).encode(), partition=0)
    producer.commit_transaction(30)  # offsets 0-2 records, 3 the commit marker: the end Spark sees is 4
    assert [o for _p, o, _v in read(topic, {0: 0}, {0: 4})] == [0, 1, 2]


def test_a_batch_cancelled_while_reading_stops() -> None:
    topic = topic_of(1)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(topic, value=b"0", partition=0)
    producer.flush(30)
    deadline.begin("reader-test", 8, 60)
    deadline.end("reader-test")  # the supervisor's cancel ends the batch while the reader waits for offset 1
    with pytest.raises(Cancelled, match="batch 8 was cancelled"):
        list(read_span(config_for(), "reader-test", 8, {topic: {0: 0}}, {topic: {0: 2}}))
