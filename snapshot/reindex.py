"""Rebuild a streaming follower's store from the topics while the old store keeps serving.

The follower's daemon keeps streaming from its own checkpoint all along;
reindex never touches that checkpoint nor the bootstrap start file. It uses a
second sink instance of the follower (docs/reindex.md says why each step):

1. capture the end offsets E1 of the followed topics;
2. ``stage`` a new store (only ``--table``'s target if given) and fill it from
   each partition's start up to E1;
3. capture E1b and catch the staged store up from E1 to E1b: the fill can
   take long, and this makes the window the next step covers a short one;
4. ``publish``: readers switch to the new store, the old one is dropped;
5. capture E2 after the switch and replay E1b..E2 into the live store. The
   daemon wrote those changes to the old store before the switch (or is
   writing them across it); the new store was built only up to E1b. Replaying
   them again where the daemon already wrote them is a no-op: versions.

A reindex of every table (no ``--table``) then records E2 as the offsets the
rebuilt store reflects (``sync.position.record_reindexed``): a follower
refused for a position past the compaction horizon resumes from there.

Killed anywhere before 4, readers never saw the staged store and the next
run's ``stage`` removes it. Killed between 4 and 5, the daemon's own writes
after the switch are in; only changes of the last seconds before the switch
may be missing until the same keys change again: run reindex again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import TopicPartition

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import ConfigError
from cdcsync.snapshot.bootstrap import Offsets, Progress, Summary, capture, offsets_json, publish, replay
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.position import record_reindexed
from cdcsync.sync.stream import build_follower

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class ReindexSummary:
    follower: str
    targets: list[str]
    fill: Summary  # steps 2 and 3, into the staged store
    catch_up: Summary  # step 5, into the live store
    published_at: float = 0.0  # unix time of the switch
    seconds: float = 0.0
    offsets: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # E1, E1b, E2

    def as_json(self) -> dict[str, Any]:
        return {
            "follower": self.follower,
            "targets": self.targets,
            "fill": {**self.fill.__dict__},
            "catch_up": {**self.catch_up.__dict__},
            "published_at": self.published_at,
            "seconds": self.seconds,
            "offsets": self.offsets,
        }


def select(mappings: dict[str, TableMapping], cfg: FollowerConfig, table: str | None) -> dict[str, TableMapping]:
    """The mappings to rebuild: all, or the one whose target or source table is ``table``."""
    if table is None:
        return mappings
    chosen = {topic: m for topic, m in mappings.items() if table in (m.target, m.table, m.table.split(".")[-1], topic)}
    if not chosen:
        known = ", ".join(sorted(m.target for m in mappings.values()))
        raise ConfigError([f"--table {table}: follower {cfg.name} has no such target or table; targets: {known}"])
    return chosen


def reindex(
    config: Config,
    cfg: FollowerConfig,
    spark: SparkSession | None,
    table: str | None = None,
    progress: Progress | None = None,
) -> ReindexSummary:
    """Run steps 1-5 of the module docstring for ``cfg`` (and ``table`` only, if given)."""
    started = time.monotonic()
    mappings = select(mappings_for(config, cfg), cfg, table)
    follower = build_follower(config, cfg, spark, mappings=mappings, open_sink=False)
    topics = sorted(mappings)
    summary = ReindexSummary(cfg.name, sorted({m.target for m in mappings.values()}), Summary(cfg.name),
                             Summary(cfg.name))  # fmt: skip
    try:
        marks = capture(config, topics)
        e1 = _high(marks)
        follower.sink.stage(list(mappings.values()))
        replay(config, follower, {tp: low for tp, (low, _) in marks.items()}, e1, summary.fill, progress)
        e1b = _high(capture(config, topics))
        replay(config, follower, e1, e1b, summary.fill, progress)
        publish(follower.sink)
        summary.published_at = time.time()
        e2 = _high(capture(config, topics))
        replay(config, follower, e1b, e2, summary.catch_up, progress)
    finally:
        follower.sink.close()
    summary.offsets = {"filled_to": offsets_json(e1), "staged_to": offsets_json(e1b), "caught_up_to": offsets_json(e2)}
    if table is None:
        record_reindexed(config, cfg.name, summary.offsets["caught_up_to"])
    summary.seconds = round(time.monotonic() - started, 2)
    return summary


def _high(marks: dict[TopicPartition, tuple[int, int]]) -> Offsets:
    return {tp: high for tp, (_low, high) in marks.items()}
