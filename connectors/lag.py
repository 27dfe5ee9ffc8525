"""Capture's lag behind its source: the facts of one source (``SourceLag``) and the capture watchdog's rule.

Per source:

- **heartbeat age**: now − the time of the newest record in
  ``__debezium-heartbeat.<source>``. Debezium heartbeats on an idle source
  too, so a young heartbeat with no recent change is *idle*, an old one is
  *stalled* (after ``stall_after_s``: ``max(60 s, 10 × heartbeat interval)``,
  the capture watchdog's rule too, ``connectors.watch``).
- **capture lag**: how far capture may be behind the source. When the newest
  change was emitted after the newest heartbeat (capture is busy), the larger
  of the heartbeat age and that change's delay (envelope ``ts_ms`` −
  ``source.ts_ms``, Debezium's own "milliseconds behind source"); otherwise
  the heartbeat age alone.
- **slot WAL retained** (Postgres): ``pg_wal_lsn_diff(pg_current_wal_lsn(),
  restart_lsn)`` of the source's slot: what a stopped pipeline pins on disk.

The report of every follower's lag and every source's is ``sync.lag_report``'s,
from one read of the logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from cdcsync.config import SourceConfig
from cdcsync.sources import kind_of

STALL_MIN_S = 60.0  # never call capture stalled sooner than this, whatever the heartbeat interval


def stall_after_s(heartbeat_interval_ms: int) -> float:
    """Heartbeats silent this long mean capture is stuck, not idle (the capture watchdog's rule)."""
    return max(STALL_MIN_S, 10 * heartbeat_interval_ms / 1000)


@dataclass(frozen=True)
class SourceLag:
    source: str
    kind: str
    heartbeat_interval_ms: int
    now_ms: int
    heartbeat_ms: int | None = None  # when the newest heartbeat was written
    newest_change_ms: int | None = None  # source.ts_ms (commit time) of the newest change in the source's topics
    newest_change_emitted_ms: int | None = None  # that change's envelope ts_ms (when Debezium emitted it)
    slot: str | None = None
    retained_wal_bytes: int | None = None

    @property
    def heartbeat_age_s(self) -> float | None:
        return None if self.heartbeat_ms is None else max(0, self.now_ms - self.heartbeat_ms) / 1000

    @property
    def newest_change_age_s(self) -> float | None:
        return None if self.newest_change_ms is None else max(0, self.now_ms - self.newest_change_ms) / 1000

    @property
    def capture_lag_s(self) -> float | None:
        age = self.heartbeat_age_s
        if self.newest_change_ms is None or self.newest_change_emitted_ms is None:
            return age
        if self.heartbeat_ms is not None and self.newest_change_emitted_ms <= self.heartbeat_ms:
            return age  # capture has spoken since it emitted the newest change: it is past it
        delay = max(0, self.newest_change_emitted_ms - self.newest_change_ms) / 1000
        return max(delay, age or 0.0)

    @property
    def state(self) -> str:
        """``capturing``, ``idle`` (heartbeats, no recent change), ``stalled`` or ``no heartbeat``."""
        age, limit = self.heartbeat_age_s, stall_after_s(self.heartbeat_interval_ms)
        if age is None:
            return "no heartbeat"
        if age > limit:
            return "stalled"
        change_age = self.newest_change_age_s
        return "idle" if change_age is None or change_age > limit else "capturing"

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "state": self.state,
            "heartbeat_age_s": self.heartbeat_age_s,
            "capture_lag_s": self.capture_lag_s,
            "newest_change_commit_ms": self.newest_change_ms,
            "newest_change_age_s": self.newest_change_age_s,
            "slot": self.slot,
            "slot_retained_wal_bytes": self.retained_wal_bytes,
        }


def heartbeat_time(value: bytes | None, record_ms: int) -> int:
    """A heartbeat's ``ts_ms`` (Debezium writes ``{"ts_ms": ...}``), else the record's own timestamp."""
    try:
        ts = orjson.loads(value or b"{}").get("ts_ms")
    except (orjson.JSONDecodeError, AttributeError):
        ts = None
    return ts if isinstance(ts, int) else record_ms


def slot_retained_wal(source: SourceConfig) -> int | None:
    """Bytes of WAL the source's replication slot keeps from being recycled; None when there is no slot."""
    return kind_of(source).capture.retained_wal(source)
