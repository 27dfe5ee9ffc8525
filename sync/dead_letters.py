"""A follower's dead-letter topic: poison records, with the reason and the source coordinates in headers."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import NewTopic

from cdcsync import kafka
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import RetryableError
from cdcsync.events import Record

QUEUE_FULL_ATTEMPTS, QUEUE_FULL_WAIT_S = 3, 20.0  # a dead letter's tries while the producer's queue is full


class DeadLetters:
    """Poison records, with the reason and the source coordinates in headers."""

    def __init__(self, client_config: dict[str, str], topic: str, follower: str) -> None:
        self.topic, self.follower = topic, follower
        # Its log lines reach logging from flush(), once a batch (cdcsync.kafka).
        self._producer = kafka.producer({**client_config, "enable.idempotence": True, "linger.ms": 5})
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
        for _attempt in range(QUEUE_FULL_ATTEMPTS):
            try:
                self._producer.produce(
                    self.topic, key=record.key, value=record.value, headers=headers, on_delivery=self._delivered
                )
                return
            except BufferError:
                # The producer's own queue is full (queue.buffering.max.messages / .kbytes): a long run of
                # poison records in one batch. Let it deliver what it holds, then queue this one.
                self._producer.flush(QUEUE_FULL_WAIT_S)
        raise RetryableError(
            f"dead-letter topic {self.topic}: the producer's queue stayed full for "
            f"{QUEUE_FULL_ATTEMPTS * QUEUE_FULL_WAIT_S:.0f}s (is Kafka reachable?)"
        )

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def flush(self, timeout: float = 60) -> None:
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            errors, self._errors = self._errors, []
            raise RetryableError(f"dead-letter topic {self.topic}: {remaining} undelivered, errors: {errors[:3]}")


def ensure_dead_letter_topic(config: Config, follower: FollowerConfig) -> None:
    """Create the follower's dead-letter topic if missing (30 days of retention: reasons to read, not state)."""
    with kafka.admin(config.kafka.client_config()) as admin:
        if follower.dlq_topic in admin.list_topics(timeout=15).topics:
            return
        futures = admin.create_topics(
            [
                NewTopic(
                    follower.dlq_topic,
                    num_partitions=1,
                    replication_factor=config.kafka.topic_replication_factor,
                    config={"retention.ms": str(30 * 24 * 3600 * 1000)},
                )
            ]
        )
        for future in futures.values():
            try:
                future.result(timeout=30)
            except Exception as err:  # created meanwhile by another process is fine
                if "TOPIC_ALREADY_EXISTS" not in str(err):
                    raise
