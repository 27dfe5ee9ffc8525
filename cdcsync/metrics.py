"""Prometheus metrics, named as deploy/'s dashboard and alert rules expect.

Counters and histograms live in the default registry; ``serve(port)`` exposes
them with ``/metrics`` (and ``/healthz``) from the daemon.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

APPLIED = Counter("cdcsync_changes_applied_total", "Changes written to a sink", ["follower", "op"])
OLDER = Counter(
    "cdcsync_changes_skipped_older_total",
    "Changes skipped: the sink held the same or a newer version, or a newer change of the key was in the batch",
    ["follower"],
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


def record_batch(follower: str, counts: Any, elapsed_s: float) -> None:
    """Count one batch (``sync.follower.BatchCounts``)."""
    BATCH.labels(follower).observe(elapsed_s)
    for op, n in counts.applied_by_op.items():
        APPLIED.labels(follower, op).inc(n)
    latency = LATENCY.labels(follower)
    for lag in counts.lags_s:
        latency.observe(lag)
    for table, ts_ms in counts.newest_commit_ms.items():
        FRESHNESS.labels(follower, table).set(ts_ms / 1000)
    OLDER.labels(follower).inc(counts.older)
    DEAD.labels(follower).inc(counts.dead_lettered)


def serve(port: int, host: str = "127.0.0.1") -> None:
    start_http_server(port, addr=host)
