"""A follower's position in the log, and whether it can still be trusted.

A follower resumes from its position: the offsets of its last committed batch
(its Spark checkpoint), or, before its first batch, the offsets its bootstrap
recorded. Two faults make that position unsafe, and both used to pass
silently (the Kafka source runs with ``failOnDataLoss=false``, which a
compacted topic's offset gaps require):

- **lost**: the position is below the partition's log start (retention, or
  records deleted) or beyond its end (the topic was deleted and recreated).
  Changes between the position and the log are gone.
- **past the horizon**: the next record to read is older than the topic's
  compaction horizon (``min.compaction.lag.ms``, set by ``connectors apply``
  from the source's ``compaction_horizon_s``). The log cleaner may already
  have removed the ``op=d`` events ahead of the follower, leaving bare
  tombstones that carry no version: the follower would keep deleted rows.

Either way the follower refuses to start, names itself and says to run
``cdcsync reindex``. A reindex that rebuilt every table of the follower
records the offsets it covered (``reindexed_file``); the store reflects the
log up to there, so the position counts from those offsets on. Gaps that
compaction leaves *within* the horizon (removed older versions of a key) are
normal and pass.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource

from cdcsync import kafka
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError, RetryableError
from cdcsync.state import base_dir

Positions = dict[str, dict[int, int]]  # topic -> partition -> next offset to read
MARGIN = 0.1  # of the horizon (at most an hour): a follower this close to it may not outrun the cleaner


class PositionError(FatalError):
    """The follower's position cannot be trusted; the message names the follower and the repair."""


@dataclass(frozen=True)
class PartitionFacts:
    """What the broker says about one partition, next to the follower's position in it."""

    topic: str
    partition: int
    position: int
    log_start: int
    log_end: int
    horizon_ms: int  # the topic's min.compaction.lag.ms
    next_record_ms: int | None  # timestamp of the first record at or after the position; None if none


def problems(facts: list[PartitionFacts], now_ms: int) -> list[str]:
    """One line per partition whose position is lost or past its compaction horizon (pure: no I/O)."""
    found = []
    for f in facts:
        where = f"{f.topic}[{f.partition}] at offset {f.position}"
        if f.position > f.log_end:
            found.append(f"{where} is beyond the log end {f.log_end}: the topic was recreated or truncated")
        elif f.position < f.log_start:
            found.append(f"{where} is below the log start {f.log_start}: changes before it were deleted")
        elif f.position < f.log_end and f.next_record_ms is not None:
            age_ms = now_ms - f.next_record_ms
            margin_ms = min(int(f.horizon_ms * MARGIN), 3_600_000)
            if f.horizon_ms == 0:
                found.append(
                    f"{where}: the topic has no compaction horizon (min.compaction.lag.ms=0), so deletes ahead "
                    "of the position may have been compacted away; `cdcsync connectors apply` sets it"
                )
            elif age_ms > f.horizon_ms - margin_ms:
                found.append(
                    f"{where}: the next change is {age_ms / 1000:.0f} s old, past the compaction horizon of "
                    f"{f.horizon_ms / 1000:.0f} s (min.compaction.lag.ms): deletes ahead of it may be compacted away"
                )
    return found


def checkpoint_dir(config: Config, follower: FollowerConfig) -> Path:
    return (
        Path(follower.checkpoint_dir) if follower.checkpoint_dir else base_dir(config) / "checkpoints" / follower.name
    )


def start_file(base: Path, follower: str) -> Path:
    """Where ``cdcsync bootstrap`` records the offsets a new follower starts streaming from."""
    return base / "bootstrap" / f"{follower}.json"


def reindexed_file(base: Path, follower: str) -> Path:
    """Where a full ``cdcsync reindex`` records the offsets its rebuilt store reflects."""
    return base / "reindexed" / f"{follower}.json"


def _offsets_json(text: str) -> Positions:
    raw = json.loads(text)
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def checkpoint_position(path: Path) -> Positions | None:
    """Where a Spark Kafka query with this checkpoint resumes; None for a query that never started.

    ``offsets/N`` holds batch N's end offsets (after a version line and a
    metadata line), ``commits/N`` marks it done; an uncommitted batch is run
    again from the previous batch's end. Before any batch committed, the
    query starts from ``sources/0/0``, its initial offsets.
    """
    commits = sorted((int(p.name) for p in (path / "commits").glob("[0-9]*")), reverse=True)
    for batch in commits:
        offsets = offsets_of_batch(path, batch)
        if offsets is not None:
            return offsets
    return initial_positions(path)


def offsets_of_batch(path: Path, batch: int) -> Positions | None:
    """Batch ``batch``'s end offsets, which Spark writes to the checkpoint before it runs the batch."""
    offsets = path / "offsets" / str(batch)
    if not offsets.exists():
        return None
    return _offsets_json(offsets.read_text().splitlines()[2])


def initial_positions(path: Path) -> Positions | None:
    """Where the query's first batch started (``sources/0/0``), if it ever started."""
    initial = path / "sources" / "0" / "0"
    if not initial.exists():
        return None
    text = initial.read_bytes().lstrip(b"\x00").decode()  # Spark writes a leading zero byte
    return _offsets_json(text.split("\n", 1)[1])


def resume_position(config: Config, follower: FollowerConfig) -> tuple[Positions, str] | None:
    """The follower's position and where it comes from; None when it will read from each log's start."""
    found = checkpoint_position(checkpoint_dir(config, follower))
    if found is not None:
        origin = f"checkpoint {checkpoint_dir(config, follower)}"
    else:
        path = start_file(base_dir(config), follower.name)
        if not path.exists():
            return None
        found = _offsets_json(json.dumps(json.loads(path.read_text())["offsets"]))
        origin = f"bootstrap start file {path}"
    # Offsets below 0 are Spark's "earliest" (-2) / "latest" (-1): nothing to check there.
    positions = {t: {p: o for p, o in parts.items() if o >= 0} for t, parts in found.items()}
    rebuilt = reindexed_file(base_dir(config), follower.name)
    if rebuilt.exists():
        covered = _offsets_json(json.dumps(json.loads(rebuilt.read_text())["offsets"]))
        for topic, parts in positions.items():
            for partition, offset in parts.items():
                parts[partition] = max(offset, covered.get(topic, {}).get(partition, offset))
        origin += f", rebuilt up to the offsets in {rebuilt}"
    return positions, origin


def record_reindexed(config: Config, follower: str, offsets: Mapping[str, Mapping[str, int]]) -> Path:
    """Record the offsets a complete rebuild of the follower's store reflects (every table)."""
    path = reindexed_file(base_dir(config), follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"at": time.time(), "offsets": offsets}))
    tmp.replace(path)
    return path


def partition_facts(config: Config, positions: Positions, timeout_s: float = 30) -> list[PartitionFacts]:
    """Ask the broker for each position's log bounds, horizon and next record's timestamp."""
    servers = config.kafka.bootstrap_servers
    topics = sorted(t for t, parts in positions.items() if parts)
    if not topics:
        return []
    try:
        with kafka.admin({**config.kafka.client_config(), "socket.timeout.ms": 10000}) as admin:
            described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
            horizon = {
                r.name: int(f.result(timeout=timeout_s)["min.compaction.lag.ms"].value) for r, f in described.items()
            }
    except KafkaException as err:
        if "UNKNOWN_TOPIC" in str(err):
            raise FatalError(f"a followed topic does not exist: {err}; run `cdcsync connectors apply`") from None
        raise RetryableError(f"Kafka unreachable at {servers}: {err}") from None
    consumer = kafka.consumer(
        {**config.kafka.client_config(), "group.id": "cdcsync-position-check", "enable.auto.commit": False}
    )
    try:
        facts, pending = [], []
        for topic in topics:
            for partition, offset in sorted(positions[topic].items()):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
                facts.append(PartitionFacts(topic, partition, offset, low, high, horizon[topic], None))
                if low <= offset < high:
                    pending.append(TopicPartition(topic, partition, offset))
        stamps = _first_timestamps(consumer, pending, timeout_s)
    finally:
        consumer.close()
    return [
        PartitionFacts(
            f.topic, f.partition, f.position, f.log_start, f.log_end, f.horizon_ms, stamps.get((f.topic, f.partition))
        )  # fmt: skip
        for f in facts
    ]


def _first_timestamps(consumer: Consumer, wanted: list[TopicPartition], timeout_s: float) -> dict[tuple[str, int], int]:
    """The timestamp of the first record at or after each given offset."""
    stamps: dict[tuple[str, int], int] = {}
    if not wanted:
        return stamps
    consumer.assign(wanted)
    deadline = time.monotonic() + timeout_s
    while len(stamps) < len(wanted) and time.monotonic() < deadline:
        for msg in consumer.consume(len(wanted), timeout=0.5):
            if msg.error() is None:
                stamps.setdefault((msg.topic(), msg.partition()), msg.timestamp()[1])
        # One record per partition is all that is needed: stop fetching the ones already seen.
        seen = [TopicPartition(t, p) for t, p in stamps]
        if seen:
            consumer.pause(seen)
    return stamps


def check_position(config: Config, follower: FollowerConfig, topics: list[str], now_ms: int | None = None) -> None:
    """Refuse (``PositionError``) a follower whose position is lost or past its compaction horizon."""
    resumed = resume_position(config, follower)
    if resumed is None:
        return
    positions, origin = resumed
    followed = {t: parts for t, parts in positions.items() if t in topics}
    found = problems(partition_facts(config, followed), now_ms if now_ms is not None else int(time.time() * 1000))
    if found:
        raise PositionError(
            f"follower {follower.name} cannot resume from its position ({origin}):\n"
            + "\n".join(f"  - {line}" for line in found)
            + f"\nIts store may hold rows deleted at the source. Rebuild it with `cdcsync reindex {follower.name}` "
            f"(every table), then start it again."
        )
