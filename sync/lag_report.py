"""Lag in one report: each follower's behind its log (``sync.lag``) and capture's behind its source
(``connectors.lag``), from one read of the logs.

``LagReader`` makes a ``LagReport`` (``cdcsync lag``, ``cdcsync status``);
``LagCollector`` is the daemon's, which exports it as gauges every
``COLLECT_S`` and keeps it for the lag page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cdcsync.config import Config, FollowerConfig, SourceConfig
from cdcsync.connectors.lag import SourceLag, heartbeat_time, slot_retained_wal
from cdcsync.sources import kind_of
from cdcsync.sync.lag import FollowerLag, LogRead, LogReader

COLLECT_S = 10.0  # the daemon's collector period


@dataclass
class LagReport:
    at_ms: int
    followers: list[FollowerLag] = field(default_factory=list)
    sources: list[SourceLag] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_ms": self.at_ms,
            "followers": [f.as_dict() for f in self.followers],
            "sources": [s.as_dict() for s in self.sources],
            "problems": self.problems,
        }


def source_lag(source: SourceConfig, read: LogRead, problems: list[str]) -> SourceLag:
    """A source's capture lag from a read of the logs (its heartbeat topic's and tables' tails)."""
    beats = [r for tp, tail in read.tails.items() if tp[0] == source.heartbeat_topic for r in tail]
    heartbeat = heartbeat_time(beats[-1][1], beats[-1][2]) if beats else None
    changes = [c for (topic, _), c in read.newest.items() if c and topic.startswith(f"{source.name}.")]
    change = max(changes, default=None)
    retained, slot = None, kind_of(source).capture.slot(source)
    if slot is not None:
        try:
            retained = slot_retained_wal(source)
            if retained is None:
                problems.append(f"source {source.name}: replication slot {slot} does not exist")
        except Exception as err:  # the source down is a finding, not a crash of the report
            problems.append(f"source {source.name}: slot {slot} unreadable: {err}".strip())
    return SourceLag(
        source.name,
        source.kind,
        source.heartbeat_interval_ms,
        read.at_ms,
        heartbeat,
        change[0] if change else None,
        change[1] if change else None,
        slot,
        retained,
    )


class LagReader:
    """One report of every follower's and source's lag; one Kafka consumer, kept between reports."""

    def __init__(self, config: Config, timeout_s: float = 15) -> None:
        self.config = config
        self.logs = LogReader(config, timeout_s)

    def close(self) -> None:
        self.logs.close()

    def report(self, followers: Iterable[FollowerConfig] | None = None, now_ms: int | None = None) -> LagReport:
        read = self.logs.read(self.config.followers if followers is None else followers, now_ms)
        report = LagReport(at_ms=read.at_ms, followers=read.followers, problems=read.problems)
        report.sources = [source_lag(source, read, report.problems) for source in self.config.sources]
        return report


class LagCollector:
    """The daemon's lag metrics: a report every ``COLLECT_S`` seconds, exported as gauges."""

    def __init__(self, config: Config, followers: list[FollowerConfig]) -> None:
        self.reader, self.followers = LagReader(config), followers

    def use(self, config: Config) -> None:
        """Report on what ``config`` captures from now on (tables found since the start: connectors.discover)."""
        self.reader.config = self.reader.logs.config = config

    def tick(self) -> LagReport:
        from cdcsync import metrics

        report = self.reader.report(self.followers)
        metrics.record_lag(report)
        return report
