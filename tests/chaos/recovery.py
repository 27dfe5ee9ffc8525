"""Recovery clocks for fault scenarios: when capture produces again, when each follower applies again."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from cdcsync.config import Config
from tests.support import ENV, uid


class CaptureClock:
    """Seconds from ``since`` until each source's table topics grow past their end at the first look after it.

    A thread of its own looks every second, through a broker that may still be starting; ``seconds`` is the
    slowest source's figure, or None while one has not produced.
    """

    def __init__(self, config: Config, since: float) -> None:
        self.topics = {s.name: [s.topic(t) for t in s.tables] for s in config.sources}
        self.since = since
        self.back: dict[str, float | None] = dict.fromkeys(self.topics)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    @property
    def seconds(self) -> float | None:
        figures = list(self.back.values())
        return None if None in figures else max(f for f in figures if f is not None)

    def _loop(self) -> None:
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}", "group.id": f"clock-{uid()}"})
        first: dict[str, int] = {}
        try:
            while not self.stop.is_set() and None in self.back.values():
                try:
                    ends = {n: sum(topic_end(consumer, t) for t in ts) for n, ts in self.topics.items()}
                except KafkaException:  # the broker is still starting
                    time.sleep(0.5)
                    continue
                for name, end in ends.items():
                    first.setdefault(name, end)
                    if self.back[name] is None and end > first[name]:
                        self.back[name] = round(time.monotonic() - self.since, 1)
                time.sleep(1)
        finally:
            consumer.close()


def topic_end(consumer: Consumer, topic: str) -> int:
    partitions = consumer.list_topics(topic, timeout=5).topics[topic].partitions or {0: None}
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in partitions)


BATCH = re.compile(r"^(\S+ \S+) INFO \S+ follower=(\w+) batch=\d+ records=\d+ applied=(\d+)", re.M)


def first_batches(log: Path, since_wall: float, followers: tuple[str, ...]) -> dict[str, float | None]:
    """Per follower, seconds from ``since_wall`` (``time.time()``) to its first batch after it that applied rows."""
    first: dict[str, float | None] = dict.fromkeys(followers)
    for stamp, follower, applied in BATCH.findall(log.read_text(errors="replace")):
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if follower in first and first[follower] is None and at >= since_wall and int(applied):
            first[follower] = round(at - since_wall, 1)
    return first
