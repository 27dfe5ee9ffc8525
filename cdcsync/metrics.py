"""Prometheus metrics, named as deploy/'s dashboard and alert rules expect.

Counters and histograms live in the default registry; ``serve(port)`` exposes
them with ``/metrics`` (and ``/healthz``) from the daemon.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

APPLIED = Counter("cdcsync_changes_applied_total", "Changes written to a sink", ["follower", "op"])
OLDER = Counter(
    "cdcsync_changes_skipped_older_total", "Changes the sink already held at the same or a newer version", ["follower"]
)
DEAD = Counter("cdcsync_dead_letters_total", "Records sent to the dead-letter topic", ["follower"])
BATCH = Histogram(
    "cdcsync_batch_duration_seconds",
    "Time to apply one micro-batch",
    ["follower"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
LATENCY = Histogram(
    "cdcsync_apply_latency_seconds",
    "Source commit to visible in the sink",
    ["follower"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
FRESHNESS = Gauge(
    "cdcsync_last_applied_commit_timestamp_seconds",
    "Source commit time of the newest change applied, per table (freshness = now - this)",
    ["follower", "table"],
)


def record_batch(follower: str, rows: Sequence[Any], result: Any, dead_lettered: int, elapsed_s: float) -> None:
    now = time.time()
    BATCH.labels(follower).observe(elapsed_s)
    exact = result.applied == len(rows)  # every row applied: per-op counts are exact
    if not exact and result.applied:
        APPLIED.labels(follower, "unknown").inc(result.applied)
    for row in rows if exact else ():
        change = row.change
        APPLIED.labels(follower, change.op).inc()
        if change.commit_ts_ms:
            LATENCY.labels(follower).observe(max(now - change.commit_ts_ms / 1000, 0))
            FRESHNESS.labels(follower, change.table).set(change.commit_ts_ms / 1000)
    OLDER.labels(follower).inc(result.stale)
    DEAD.labels(follower).inc(dead_lettered)


def serve(port: int, host: str = "127.0.0.1") -> None:
    start_http_server(port, addr=host)
