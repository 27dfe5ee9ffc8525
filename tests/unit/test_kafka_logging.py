"""librdkafka's log lines reach Python logging (``cdcsync.kafka``), never the process's stderr.

On the real librdkafka, against a port nothing listens on (no server: every
connection is refused at once), each kind of client is built by
``cdcsync.kafka`` and used the way cdcsync uses it. librdkafka writes to file
descriptor 2 itself, so stderr is read with ``capfd``.
"""

from __future__ import annotations

import logging
import pickle

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from cdcsync import kafka
from cdcsync.config import KafkaSettings
from cdcsync.resolvers import SnapshotLsns

DEAD = "127.0.0.1:1"
WAIT_S = 3  # long enough for librdkafka's thread to try the port on a busy machine


def settings() -> dict[str, str]:
    return KafkaSettings(bootstrap_servers=DEAD).client_config()


def refused(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of librdkafka's ``FAIL`` line for the refused connection."""
    return [
        r
        for r in caplog.records
        if r.name == "cdcsync.kafka" and "FAIL" in r.getMessage() and "Connection refused" in r.getMessage()
    ]


def raw_lines(capfd: pytest.CaptureFixture[str]) -> list[str]:
    """What librdkafka wrote to stderr itself: ``%<level>|<time>|<facility>|<client>| <message>``."""
    return [line for line in capfd.readouterr().err.splitlines() if line.startswith("%")]


def test_a_consumer_logs_on_close(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    consumer = kafka.consumer({**settings(), "group.id": "test-kafka-logging"})
    with pytest.raises(KafkaException):
        consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=WAIT_S)
    consumer.close()
    assert refused(caplog) and all(r.levelno == logging.ERROR for r in refused(caplog))
    assert raw_lines(capfd) == []


def test_a_consumer_kept_for_metadata_serves_its_log_lines(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    consumer = kafka.consumer({**settings(), "group.id": "test-kafka-logging"})  # as the capture watch keeps one
    try:
        with pytest.raises(KafkaException):
            consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=WAIT_S)
        kafka.serve_logs(consumer)
        assert refused(caplog)
    finally:
        consumer.close()
    assert raw_lines(capfd) == []


def test_a_producer_logs_on_flush(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    producer = kafka.producer(settings())
    producer.produce("t", b"v")
    assert producer.flush(WAIT_S)  # undelivered: nothing listens
    assert refused(caplog)
    del producer
    assert raw_lines(capfd) == []


def test_an_admin_client_logs_when_its_block_ends(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with kafka.admin(settings()) as admin, pytest.raises(KafkaException):
        admin.list_topics(timeout=WAIT_S)
    assert refused(caplog)
    del admin
    assert raw_lines(capfd) == []


def test_without_a_logger_librdkafka_writes_to_stderr_itself(capfd: pytest.CaptureFixture[str]) -> None:
    """What the tests above rule out is there to see: ``capfd`` catches librdkafka's own writes."""
    consumer = Consumer({**settings(), "group.id": "test-kafka-logging"})
    lines: list[str] = []
    try:
        for _ in range(10 * WAIT_S):
            consumer.poll(0.1)
            lines += raw_lines(capfd)
            if any("|FAIL|" in line and "Connection refused" in line for line in lines):
                break
    finally:
        consumer.close()
    assert any("|FAIL|" in line and "Connection refused" in line for line in lines + raw_lines(capfd))


def test_building_a_client_leaves_the_settings_fit_to_ship() -> None:
    """The logger goes into the client's own copy: settings that reach Spark tasks (``SnapshotLsns``) stay text."""
    shipped = settings()
    lsns = SnapshotLsns(shipped)
    kafka.consumer({**shipped, "group.id": "test-kafka-logging"}).close()
    kafka.producer(shipped)
    with kafka.admin(shipped):
        pass
    assert all(isinstance(value, str) for value in shipped.values())
    assert pickle.loads(pickle.dumps(lsns)).kafka == shipped
