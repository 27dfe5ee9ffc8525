"""``snapshot.bootstrap.read_window`` against the real Kafka: a reader let go half-way leaves no error behind."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from snapshot.bootstrap import read_window
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
