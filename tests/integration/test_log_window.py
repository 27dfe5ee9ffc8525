"""The bootstrap's Kafka clients against the real Kafka: a window read let go half-way leaves no error behind, and a
short-lived client closes at once."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdcsync.config import KafkaSettings
from snapshot.replay import end_offsets, read_window
from tests.support import ENV, uid

SERVERS = f"127.0.0.1:{ENV['KAFKA_PORT']}"


def test_a_window_read_whose_consumer_was_closed_first_closes_cleanly() -> None:
    """A bootstrap stopped half-way closes its consumer, then drops the read; the read must not raise then.

    CI saw the read's clean-up call the closed consumer ("Consumer closed"),
    raised from inside the garbage collector as an unraisable exception.
    """
    topic = f"t{uid()}_window"
    admin = AdminClient({"bootstrap.servers": SERVERS})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)
    try:
        producer = Producer({"bootstrap.servers": SERVERS})
        for n in range(3):
            producer.produce(topic, key=str(n).encode(), value=b"{}")
        assert producer.flush(30) == 0
        reader = Consumer({"bootstrap.servers": SERVERS, "group.id": f"test-{uid()}", "enable.auto.commit": False})
        window = read_window(reader, {}, {TopicPartition(topic, 0): 3}, batch_rows=1, timeout_s=60)
        first = next(window)
        assert [r.offset for r in first][:1] == [0]
        reader.close()
        window.close()  # the generator's clean-up runs here, after the consumer is gone
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


def test_a_short_lived_client_closes_at_once() -> None:
    """A bootstrap, reindex, ``cdcsync lag`` or ``status`` makes a client, asks Kafka one thing, and closes it.

    librdkafka (2.5 on) then waited up to a second for its last client-metrics
    push (KIP-714): 14 of 40 such closes took 1.0 s, a second of fixed cost in
    a bootstrap that copies a 200k-row table in a few (docs/performance.md).
    cdcsync's clients do not push metrics (``CLIENT_DEFAULTS``).
    """
    topic = f"t{uid()}_close"
    client = KafkaSettings(bootstrap_servers=SERVERS).client_config()
    admin = AdminClient(client)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)
    try:
        closes = []
        for _ in range(20):  # 0.65 ** 20: the old clients all closed at once one run in 5,000
            probe = Consumer({**client, "group.id": f"test-{uid()}", "enable.auto.commit": False})
            assert end_offsets(probe, [topic]) == {TopicPartition(topic, 0): (0, 0)}
            started = time.monotonic()
            probe.close()
            closes.append(round(time.monotonic() - started, 3))
        assert max(closes) < 0.5, closes
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)
