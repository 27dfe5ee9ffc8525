"""Bootstrap a new follower from the compacted topics, aligned with exact offsets.

1. Capture, first, the end offset E of every partition of the followed topics.
2. Read each partition from its start up to E and apply it through the
   follower's own batch path (parse, dead letters, last per key, versioned
   writes), in chunks, in offset order.
3. Only when every write is done, record E as the follower's start position
   (``<state>/bootstrap/<follower>.json``, written atomically).
4. ``cdcsync run`` starts a follower that has no checkpoint yet from that
   position: every change before E is in the store, every change from E on
   is streamed. No gap; and no double apply, which the versions would make
   harmless anyway.

Killed half-way, nothing was recorded, so a re-run starts over; the versioned
writes make the repeat idempotent. A follower that already has a checkpoint is
refused: it is streaming, and rebuilding it is ``reindex``'s job.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError
from cdcsync.sync.follower import BatchCounts, Follower, Record
from cdcsync.sync.stream import start_file

CHUNK = 5000


@dataclass
class Summary:
    follower: str
    records: int = 0
    applied: int = 0
    older: int = 0
    tombstones: int = 0
    dead_lettered: int = 0
    seconds: float = 0.0
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, counts: BatchCounts) -> None:
        self.records += counts.consumed
        self.applied += counts.applied
        self.older += counts.older
        self.tombstones += counts.tombstones
        self.dead_lettered += counts.dead_lettered


def end_offsets(consumer: Consumer, topics: list[str]) -> dict[TopicPartition, tuple[int, int]]:
    """(low, high) watermarks of every partition of every topic, captured now."""
    metadata = consumer.list_topics(timeout=30).topics
    marks = {}
    for topic in topics:
        if topic not in metadata:
            raise FatalError(f"topic {topic} does not exist; apply the connectors first (cdcsync connectors apply)")
        for partition in metadata[topic].partitions:
            tp = TopicPartition(topic, partition)
            marks[tp] = consumer.get_watermark_offsets(tp, timeout=30)
    return marks


def bootstrap_from_topics(
    config: Config,
    cfg: FollowerConfig,
    follower: Follower,
    checkpoint: Path,
    base: Path,
    progress: Callable[[int, int, float], None] | None = None,
) -> Summary:
    if checkpoint.exists() and any(checkpoint.iterdir()):
        raise FatalError(
            f"follower {cfg.name} already has a checkpoint at {checkpoint}: it is streaming. "
            "Bootstrap builds a new follower; stop it and remove the checkpoint to rebuild it from scratch"
        )
    summary, started = Summary(cfg.name), time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": config.kafka.bootstrap_servers,
            "group.id": f"cdcsync-bootstrap-{cfg.name}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        marks = end_offsets(consumer, sorted(follower.mappings))
        total = sum(high - low for low, high in marks.values())
        pending = {tp: high for tp, (low, high) in marks.items() if high > low}
        consumer.assign([TopicPartition(tp.topic, tp.partition, marks[tp][0]) for tp in pending])
        batch: list[Record] = []
        batch_id = 0
        while pending:
            for msg in consumer.consume(1000, timeout=1):
                if msg.error():
                    continue
                tp = TopicPartition(msg.topic(), msg.partition())
                end = pending.get(tp)
                if end is None or msg.offset() >= end:
                    continue  # past the captured end: that belongs to the stream
                batch.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))
                if msg.offset() + 1 >= end:
                    del pending[tp]
                    consumer.incremental_unassign([tp])
            if pending:  # compaction can leave no record just before the end: ask where we are
                for tp in consumer.position([TopicPartition(t.topic, t.partition) for t in pending]):
                    key = TopicPartition(tp.topic, tp.partition)
                    if tp.offset >= pending[key]:
                        del pending[key]
                        consumer.incremental_unassign([key])
            if len(batch) >= CHUNK or (batch and not pending):
                summary.add(follower.process(batch_id, batch))
                batch_id += 1
                batch = []
                if progress:
                    progress(summary.records, total, time.monotonic() - started)
        summary.offsets = {}
        for tp, (_low, high) in marks.items():
            summary.offsets.setdefault(tp.topic, {})[str(tp.partition)] = high
    finally:
        consumer.close()
    summary.seconds = round(time.monotonic() - started, 2)
    record_start(base, cfg.name, summary.offsets, origin="topics")
    return summary


def record_start(base: Path, follower: str, offsets: dict[str, dict[str, int]], origin: str) -> None:
    """Record where the follower starts streaming, atomically: a half-done bootstrap records nothing.

    Topics bootstrapped earlier (``--table``) keep their recorded offsets.
    """
    path = start_file(base, follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(path.read_text())["offsets"] if path.exists() else {}  # --table: keep the other tables'
    merged.update(offsets)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"follower": follower, "offsets": merged, "from": origin, "recorded_at": time.time()}))
    os.replace(tmp, path)


def progress_bar(done: int, total: int, elapsed: float) -> None:
    """One line on stderr: rows, rows/s and ETA (redrawn in place on a terminal)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else 0.0
    pct = 100.0 * done / total if total else 100.0
    line = f"bootstrap: {done:,}/{total:,} records ({pct:5.1f}%)  {rate:,.0f}/s  ETA {eta:,.0f}s"
    end = "\r" if sys.stderr.isatty() and done < total else "\n"
    print(line, end=end, file=sys.stderr, flush=True)


def as_json(summary: Summary) -> dict[str, Any]:
    return {**summary.__dict__}
