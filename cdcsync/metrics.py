"""Prometheus metrics, named as deploy/'s dashboard and alert rules expect.

Counters and histograms live in the default registry; ``serve(port)`` exposes
them at ``/metrics``, the daemon's health at ``/healthz`` (200 when every
follower runs, 503 naming the ones that do not) and the lag page at ``/``
(``/lag.json`` its data; ``cdcsync.lagpage``). The lag gauges are set by the
daemon's collector thread from ``sync.lag_report`` (``record_lag``), every ~10 s; the
last report is kept whole for the page.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest

from cdcsync import __version__

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
    "Source commit to written in the sink (Elasticsearch: refreshed right after, refresh_each_batch)",
    ["follower"],
    # Fine enough around the freshness goals (1-2 s; Delta 10 s) that histogram_quantile does not
    # interpolate a p99 of 4.9 s across a 2-5 s bucket (bench.freshness, docs/performance.md); and past a
    # minute, for a follower behind: a 60-300 s bucket read 63-72 s of markers as p50 129 s, p99 297 s.
    buckets=(0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600),
)
FRESHNESS = Gauge(
    "cdcsync_last_applied_commit_timestamp_seconds",
    "Source commit time of the newest change applied, per table (freshness = now - this)",
    ["follower", "table"],
)

FOLLOWER_STATE = Gauge(
    "cdcsync_follower_state",
    "1 for the state each follower is in (starting, running, restarting, stopped), 0 for the others",
    ["follower", "state"],
)
RESTARTS = Counter("cdcsync_follower_restarts_total", "Times the supervisor restarted a failed follower", ["follower"])
BATCH_STALLED_S = Gauge(
    "cdcsync_batch_stalled_seconds",
    "Seconds the follower's running batch has made no progress (0 between batches); past its deadline it is cancelled",
    ["follower"],
)
BATCHES_CANCELLED = Counter(
    "cdcsync_batches_cancelled_total", "Batches cancelled past their deadline without progress", ["follower"]
)

CAPTURE_HEARTBEAT_AGE = Gauge(
    "cdcsync_capture_heartbeat_age_seconds",
    "Seconds since the source's Debezium heartbeat topic last grew (idle sources keep heartbeating; stuck ones stop)",
    ["source"],
)
CAPTURE_UNRECOVERABLE = Gauge(
    "cdcsync_capture_unrecoverable",
    "1 while a source's connector is FAILED on an error a restart cannot fix (the watchdog names the fix), else 0",
    ["source"],
)
CAPTURE_HEALS = Counter(
    "cdcsync_capture_heals_total",
    "Actions the capture watchdog took: restart_failed, restart_stalled, slot_freed, source_setup",
    ["source", "action"],
)

SCHEMA_CHANGES = Counter(
    "cdcsync_schema_changes_total",
    "Times a follower met columns its mapping lacked and re-read the table's shape from the catalog",
    ["follower", "table"],
)
REINDEX_NEEDED = Gauge(
    "cdcsync_reindex_needed",
    "1 while a table's rows differ from the source in a way no change event will fix (a RENAME COLUMN, a column "
    "added with a DEFAULT): run `cdcsync reindex FOLLOWER --table TABLE --from source`; or while its Elasticsearch "
    "index has configured settings only a new index takes: `cdcsync reindex FOLLOWER --table TABLE`",
    ["follower", "table"],
)
REBUILD_NEEDED = Gauge(
    "cdcsync_rebuild_needed",
    "The old name of cdcsync_reindex_needed (the same labels and values), kept because an alert someone wrote may "
    "use it",
    ["follower", "table"],
)
# An old name -> the metric it repeats: set with it (record_reindex_needed), on no dashboard and in no rule.
OLD_NAMES = {"cdcsync_rebuild_needed": "cdcsync_reindex_needed"}
TABLE_HELD = Gauge(
    "cdcsync_table_held",
    "1 while a follower holds a table whose changes its sink failed for alone (an index closed or write-blocked, a "
    "table it cannot write): its other tables go on, this one waits from where it stopped and is tried again every "
    "minute (cdcsync status names the reason and the fix)",
    ["follower", "table"],
)
MARKERS_PURGED = Counter(
    "cdcsync_delete_markers_purged_total",
    "Delete markers removed from a store once older than the source's compaction horizon (no replay needs them)",
    ["follower", "table"],
)
SINK_RETRIES = Counter(
    "cdcsync_sink_retries_total", "Writes of a chunk retried after a retryable sink error", ["follower"]
)

OFFSETS_BEHIND = Gauge(
    "cdcsync_follower_offsets_behind",
    "Log end offset minus the follower's position (its checkpoint), per topic partition",
    ["follower", "topic", "partition"],
)
SECONDS_BEHIND = Gauge(
    "cdcsync_follower_seconds_behind",
    "Source commit time of the newest change in the log minus that of the last change applied; 0 when caught up",
    ["follower", "table"],
)
CAPTURE_LAG = Gauge(
    "cdcsync_capture_lag_seconds",
    "How far capture may be behind its source: heartbeat age, or the newest change's delay while capture is busy",
    ["source"],
)
SLOT_RETAINED_WAL = Gauge(
    "cdcsync_slot_retained_wal_bytes",
    "WAL a Postgres replication slot keeps from being recycled: pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)",
    ["source", "slot"],
)

VERIFY_DIVERGENT = Gauge(
    "cdcsync_verify_divergent_rows",
    "Rows in which the store differed from the source (missing + stale + extra) at the table's last complete "
    "background verify pass, after its re-check of rows in flight",
    ["follower", "table"],
)
VERIFY_LAST_PASS = Gauge(
    "cdcsync_verify_last_pass_timestamp_seconds",
    "When the table's last complete background verify pass ended (Unix time)",
    ["follower", "table"],
)
VERIFY_PERIOD = Gauge(
    "cdcsync_verify_period_seconds", "How often each table's background verify pass starts (verify.period_s)",
    ["follower"],
)  # fmt: skip

DELTA_FILES = Gauge(
    "cdcsync_delta_table_files",
    "Live data files of a Delta table after its last upkeep pass",
    ["follower", "table"],
)
DELTA_BYTES = Gauge(
    "cdcsync_delta_table_bytes",
    "Bytes of a Delta table's live data files after its last upkeep pass (what a read of it scans)",
    ["follower", "table"],
)
DELTA_DISK_BYTES = Gauge(
    "cdcsync_delta_table_disk_bytes",
    "Bytes on disk under a local Delta table's directory after its last upkeep pass: live files, files kept "
    "for the retention window, the log",
    ["follower", "table"],
)

BUILD = Gauge(
    "cdcsync_build_info",
    "Always 1: the running cdcsync's version, and those of Python, PySpark and delta-spark it runs with",
    ["version", "python", "pyspark", "delta"],
)

Health = Callable[[], tuple[bool, list[str]]]  # (healthy, one line per problem)

_latest_lag: list[Any] = []  # the collector's last LagReport, for the lag page


def record_build() -> None:
    """Set ``cdcsync_build_info`` (the daemon, once it starts serving)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "none"

    BUILD.labels(__version__, platform.python_version(), of("pyspark"), of("delta-spark")).set(1)


def record_reindex_needed(follower: str, table: str, needed: bool) -> None:
    """``cdcsync_reindex_needed`` of the table, and its old name with it (``sync.reindex_needed``)."""
    for gauge in (REINDEX_NEEDED, REBUILD_NEEDED):
        gauge.labels(follower, table).set(1 if needed else 0)


def record_table_size(follower: str, table: str, files: int, size: int, disk: int | None) -> None:
    """A Delta table's size after an upkeep pass (``sync.delta_upkeep``); ``disk``: None off local disk."""
    DELTA_FILES.labels(follower, table).set(files)
    DELTA_BYTES.labels(follower, table).set(size)
    if disk is not None:
        DELTA_DISK_BYTES.labels(follower, table).set(disk)


def record_batch(follower: str, counts: Any, elapsed_s: float) -> None:
    """Count one batch (``sync.batch_counts.BatchCounts``)."""
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


def record_lag(report: Any) -> None:
    """Set the lag gauges from one ``sync.lag_report.LagReport``; a value that could not be read is left as it was."""
    _latest_lag[:] = [report]
    for follower in report.followers:
        seconds: dict[str, float] = {}
        for table in follower.tables:
            for part in table.partitions:
                OFFSETS_BEHIND.labels(follower.follower, table.topic, str(part.partition)).set(part.offsets_behind)
            if table.seconds_behind is not None:  # two sources with one table name share the label: the worse
                seconds[table.table] = max(table.seconds_behind, seconds.get(table.table, 0.0))
        for table_name, value in seconds.items():
            SECONDS_BEHIND.labels(follower.follower, table_name).set(value)
    for source in report.sources:
        if source.capture_lag_s is not None:
            CAPTURE_LAG.labels(source.source).set(source.capture_lag_s)
        if source.slot is not None and source.retained_wal_bytes is not None:
            SLOT_RETAINED_WAL.labels(source.source, source.slot).set(source.retained_wal_bytes)


def latest_lag() -> Any:
    """The last ``sync.lag_report.LagReport`` recorded, or None before the collector's first round."""
    return _latest_lag[0] if _latest_lag else None


# path -> (body, content type), or None for a path it does not serve: the lag page (cdcsync.lagpage.pages).
Pages = Callable[[str], "tuple[bytes, str] | None"]


def serve(
    port: int, host: str = "127.0.0.1", health: Health | None = None, pages: Pages | None = None
) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` and ``pages`` (the lag page: ``/``, ``/lag``, ``/lag.json``) on a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok, problems = health() if health is not None else (True, [])
                body = "ok\n" if ok else "".join(f"{line}\n" for line in problems)
                self._answer(200 if ok else 503, body.encode(), "text/plain; charset=utf-8")
            elif pages is not None and (page := pages(path)) is not None:
                self._answer(200, *page)
            else:
                self._answer(404, b"not found: try /, /metrics or /healthz\n", "text/plain; charset=utf-8")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes are not the daemon's news
            pass

    record_build()
    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="cdcsync-metrics", daemon=True).start()
    return server
