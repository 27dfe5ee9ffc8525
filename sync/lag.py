"""Follower lag: how far each follower is behind its log.

Spark's Kafka source commits no offsets to Kafka, so consumer-lag tools see
nothing of a follower; its position is read from its own checkpoint
(``sync.position.resume_position``), which is also how ``cdcsync lag`` works
without the daemon. Per follower, table and partition:

- **offsets behind** = log end − position (the next offset it reads), ≥ 0.
  Compacted topics have gaps, so this counts offsets, not records, as Spark's
  own ``offsetsBehindLatest`` does.
- **seconds behind** = Debezium ``source.ts_ms`` (the source commit time) of
  the newest change in the partition − that of the last change the follower
  applied (the change just before its position; before its first change, the
  first one it has yet to read). 0 when offsets behind is 0.

The arithmetic is pure (``PartitionLag``, ``TableLag``); ``LogReader`` reads
the logs once for every follower, and for capture's lag
(``sync.lag_report``, which makes the report ``cdcsync lag``, the daemon's
collector and the lag page show).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from cdcsync import kafka
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import RetryableError
from cdcsync.sync.position import resume_position

log = logging.getLogger("cdcsync.lag")

WINDOW = 64  # records read before a position (or the log end) to find the last change with a value


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    position: int | None  # the next offset the follower reads; None: it has no position (reads from the start)
    log_start: int
    log_end: int
    applied_ms: int | None = None  # source.ts_ms of the last change before the position
    pending_ms: int | None = None  # source.ts_ms of the first change at or after the position
    newest_ms: int | None = None  # source.ts_ms of the last change in the partition

    @property
    def offsets_behind(self) -> int:
        start = self.log_start if self.position is None else max(self.position, self.log_start)
        return max(0, self.log_end - start)

    @property
    def seconds_behind(self) -> float | None:
        """None when behind but the commit times could not be read."""
        if self.offsets_behind == 0:
            return 0.0
        base = self.applied_ms if self.applied_ms is not None else self.pending_ms
        if base is None or self.newest_ms is None:
            return None
        return max(0, self.newest_ms - base) / 1000

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "position": self.position,
            "log_start": self.log_start,
            "log_end": self.log_end,
            "offsets_behind": self.offsets_behind,
            "seconds_behind": self.seconds_behind,
            "applied_commit_ms": self.applied_ms,
            "newest_commit_ms": self.newest_ms,
        }


@dataclass(frozen=True)
class TableLag:
    source: str
    table: str  # namespace.table, as in cdcsync_last_applied_commit_timestamp_seconds
    topic: str
    partitions: list[PartitionLag]

    @property
    def offsets_behind(self) -> int:
        return sum(p.offsets_behind for p in self.partitions)

    @property
    def seconds_behind(self) -> float | None:
        """The worst partition's; None when a partition is behind by unknown seconds and none is known behind."""
        known = [s for s in (p.seconds_behind for p in self.partitions) if s is not None]
        worst = max(known, default=0.0)
        return None if len(known) < len(self.partitions) and not worst else worst

    @property
    def state(self) -> str:
        return "behind" if self.offsets_behind else "caught up"

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "table": self.table,
            "topic": self.topic,
            "state": self.state,
            "offsets_behind": self.offsets_behind,
            "seconds_behind": self.seconds_behind,
            "partitions": [p.as_dict() for p in self.partitions],
        }


@dataclass(frozen=True)
class FollowerLag:
    follower: str
    position_from: str  # the checkpoint, the bootstrap start file, or none
    tables: list[TableLag]

    def as_dict(self) -> dict[str, Any]:
        return {
            "follower": self.follower,
            "position_from": self.position_from,
            "offsets_behind": sum(t.offsets_behind for t in self.tables),
            "tables": [t.as_dict() for t in self.tables],
        }


# --------------------------------------------------------------------------- reading records


def commit_times(value: bytes | None) -> tuple[int, int] | None:
    """(source.ts_ms, envelope ts_ms) of a Debezium change; None for a tombstone or anything else."""
    if value is None:
        return None
    try:
        envelope = orjson.loads(value)
        source = envelope.get("source") or {}
        commit, emitted = source.get("ts_ms"), envelope.get("ts_ms")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(commit, int):
        return None
    return commit, emitted if isinstance(emitted, int) else commit


Span = tuple[int, int]  # [from, to) offsets to read
Read = list[tuple[int, bytes | None, int]]  # (offset, value, record timestamp ms)


@dataclass
class LogRead:
    """One read of the logs: each partition's bounds and tail, and the followers' lag in them."""

    at_ms: int
    bounds: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    tails: dict[tuple[str, int], Read] = field(default_factory=dict)
    newest: dict[tuple[str, int], tuple[int, int] | None] = field(default_factory=dict)  # last change's times
    followers: list[FollowerLag] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class LogReader:
    """Reads positions, log bounds and commit times; one Kafka consumer, kept between reads."""

    def __init__(self, config: Config, timeout_s: float = 15) -> None:
        self.config, self.timeout_s = config, timeout_s
        self._consumer: Consumer | None = None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = kafka.consumer(
                {
                    **self.config.kafka.client_config(),
                    "group.id": "cdcsync-lag",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                }
            )
        return self._consumer

    def read(self, followers: Iterable[FollowerConfig], now_ms: int | None = None) -> LogRead:
        """Every captured table's and heartbeat topic's bounds and tail, and each follower's lag in them."""
        try:
            return self._read(followers, now_ms)
        finally:
            if self._consumer is not None:  # nothing is assigned between scans, and a read may scan nothing
                kafka.serve_logs(self._consumer)

    def _read(self, followers: Iterable[FollowerConfig], now_ms: int | None) -> LogRead:
        config = self.config
        read = LogRead(at_ms=now_ms if now_ms is not None else int(time.time() * 1000))
        topics = {s.topic(t): (s, t) for s in config.sources for t in s.tables}
        wanted = [*topics, *(s.heartbeat_topic for s in config.sources)]
        try:
            metadata = self.consumer.list_topics(timeout=self.timeout_s).topics
        except KafkaException as err:
            raise RetryableError(f"Kafka unreachable at {config.kafka.bootstrap_servers}: {err}") from None
        bounds = read.bounds
        for topic in wanted:
            info = metadata.get(topic)
            if info is None or info.error is not None or not info.partitions:
                read.problems.append(f"topic {topic} does not exist yet (is its connector registered?)")
                continue
            for partition in sorted(info.partitions):
                low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), self.timeout_s)
                bounds[(topic, partition)] = (int(low), int(high))
        read.tails = self._scan({tp: (max(lo, hi - WINDOW), hi) for tp, (lo, hi) in bounds.items() if hi > lo})
        read.newest = {tp: _last_change(tail) for tp, tail in read.tails.items()}
        read.followers = self._followers(list(followers), bounds, read.newest)
        return read

    def _followers(
        self,
        chosen: list[FollowerConfig],
        bounds: dict[tuple[str, int], tuple[int, int]],
        newest: dict[tuple[str, int], tuple[int, int] | None],
    ) -> list[FollowerLag]:
        config = self.config
        plans: list[tuple[FollowerConfig, str, dict[str, dict[int, int]]]] = []
        asks: list[tuple[tuple[str, int], int]] = []  # (partition, position) whose commit times are needed
        for cfg in chosen:
            resumed = resume_position(config, cfg)
            positions, origin = resumed if resumed is not None else ({}, "none: reads each log from its start")
            plans.append((cfg, origin, positions))
            for source, table in config.followed_tables(cfg):
                topic = source.topic(table)
                for (t, partition), (lo, hi) in bounds.items():
                    pos = positions.get(topic, {}).get(partition)
                    if t == topic and hi > max(lo, pos if pos is not None else lo):
                        asks.append(((t, partition), max(lo, pos) if pos is not None else lo))
        around = self._around(asks, bounds)
        lags = []
        for cfg, origin, positions in plans:
            tables = []
            for source, table in config.followed_tables(cfg):
                topic = source.topic(table)
                parts = []
                for (t, partition), (lo, hi) in sorted(bounds.items()):
                    if t != topic:
                        continue
                    pos = positions.get(topic, {}).get(partition)
                    start = lo if pos is None else max(lo, pos)
                    applied, pending = around.get(((t, partition), start), (None, None))
                    last = newest.get((t, partition))
                    parts.append(PartitionLag(partition, pos, lo, hi, applied, pending, last[0] if last else None))
                if parts:
                    tables.append(TableLag(source.name, str(table), topic, parts))
            lags.append(FollowerLag(cfg.name, origin, tables))
        return lags

    def _around(
        self, asks: list[tuple[tuple[str, int], int]], bounds: dict[tuple[str, int], tuple[int, int]]
    ) -> dict[tuple[tuple[str, int], int], tuple[int | None, int | None]]:
        """Per (partition, position): the commit time of the last change before it and of the first at or after."""
        found: dict[tuple[tuple[str, int], int], tuple[int | None, int | None]] = {}
        pending = sorted(set(asks))
        while pending:  # a partition can be assigned once per scan: followers at different positions take turns
            now: dict[tuple[str, int], int] = {}
            later = []
            for tp, pos in pending:
                if tp in now:
                    later.append((tp, pos))
                else:
                    now[tp] = pos
            reads = self._scan({tp: (max(bounds[tp][0], pos - WINDOW), min(bounds[tp][1], pos + WINDOW))
                                for tp, pos in now.items()})  # fmt: skip
            for tp, pos in now.items():
                read = reads.get(tp, [])
                before = _last_change([r for r in read if r[0] < pos])
                after = next((c for o, v, _ in read if o >= pos for c in [commit_times(v)] if c), None)
                found[(tp, pos)] = (before[0] if before else None, after[0] if after else None)
            pending = later
        return found

    def _scan(self, spans: dict[tuple[str, int], Span]) -> dict[tuple[str, int], Read]:
        """Read each partition's span [from, to); stops at its end, its log end, or the timeout."""
        reads: dict[tuple[str, int], Read] = {tp: [] for tp in spans}
        todo = {tp for tp, (lo, hi) in spans.items() if hi > lo}
        if not todo:
            return reads
        consumer = self.consumer
        assigned = [TopicPartition(t, p, spans[(t, p)][0]) for t, p in todo]
        consumer.assign(assigned)
        deadline = time.monotonic() + self.timeout_s
        try:
            while todo and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.5):
                    tp = (msg.topic(), msg.partition())
                    if tp not in todo:
                        continue
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            todo.discard(tp)
                        continue
                    offset = msg.offset()
                    if offset < spans[tp][1]:
                        reads[tp].append((offset, msg.value(), msg.timestamp()[1]))
                    if offset >= spans[tp][1] - 1:
                        todo.discard(tp)
                done = [tp for tp in assigned if (tp.topic, tp.partition) not in todo]
                if done:
                    consumer.pause(done)
        finally:
            consumer.resume(assigned)  # librdkafka keeps a partition paused across assignments
            consumer.unassign()
        if todo:
            log.warning("lag: %d partition(s) not read within %.0f s: %s", len(todo), self.timeout_s, sorted(todo)[:5])
        return reads


def _last_change(read: Read) -> tuple[int, int] | None:
    """The commit times of the last change (a record with a Debezium value) in what was read."""
    for _offset, value, _ts in reversed(read):
        times = commit_times(value)
        if times is not None:
            return times
    return None
