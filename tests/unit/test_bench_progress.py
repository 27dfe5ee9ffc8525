"""bench.daemon_report: the medians of Spark's progress lines per follower, and a phase's latency histogram."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bench.daemon_report import batch_phases


def progress(name: str, at: float, rows: int, add_batch: int) -> str:
    body = {
        "name": f"cdcsync-{name}",
        "timestamp": datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z"),
        "numInputRows": rows,
        "durationMs": {"addBatch": add_batch, "walCommit": 20, "triggerExecution": add_batch + 40},
    }
    # as log4j prints it: a pattern line, then Spark's pretty-printed JSON over several lines
    line = "2026-11-23 12:12:27,730 INFO spark.ProgressReporter Streaming query made progress: "
    return f"{line}{json.dumps(body, indent=2)}\n"


def test_phases_are_per_follower_within_the_window_and_skip_empty_batches(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    lines = [progress("search", 100 + i, 1000, 300 + 100 * i) for i in range(3)]  # 300, 400, 500 ms
    lines += [progress("search", 103.5, 0, 9), progress("search", 200, 1000, 9999)]  # empty; outside
    lines += [progress("warehouse", 100, 10_000, 8000), "2026-11-23 INFO cdcsync.follower batch=3 applied=1000\n"]
    log.write_text("".join(lines))

    found = batch_phases(log, since=100, until=150)

    assert set(found) == {"search", "warehouse"}
    assert found["search"]["batches"] == 3
    assert found["search"]["addBatch"] == 400
    assert found["search"]["every_s"] == 1.0
    assert found["search"]["latestOffset"] == 0  # a phase Spark did not report
    assert found["warehouse"]["every_s"] is None  # one batch: no interval


def test_a_phase_histogram_is_the_difference_of_two_scrapes_read_as_histogram_quantile_does() -> None:
    from bench.daemon_report import bucket_quantile, counter_delta, histogram_delta, within

    def bucket(le: str, follower: str = "search") -> tuple[str, tuple[tuple[str, str], ...]]:
        return ("cdcsync_apply_latency_seconds_bucket", (("follower", follower), ("le", le)))

    before = {bucket("1.0"): 10.0, bucket("2.0"): 10.0, bucket("+Inf"): 10.0, bucket("1.0", "cache"): 5.0}
    after = {bucket("1.0"): 60.0, bucket("2.0"): 110.0, bucket("+Inf"): 110.0, bucket("1.0", "cache"): 9.0}
    applied = ("cdcsync_changes_applied_total", (("follower", "search"), ("op", "u")))
    hist = histogram_delta(before, after, "search")
    assert hist == [(1.0, 50.0), (2.0, 100.0), (float("inf"), 100.0)]
    assert bucket_quantile(hist, "p50") == 1.0  # the 50th of 100 is the last of the first bucket
    assert bucket_quantile(hist, "p99") == 1.98  # linear within 1-2 s: 49 of its 50
    assert within(hist, 1.0) == 0.5 and within(hist, 2.0) == 1.0
    assert bucket_quantile([], "p50") is None
    assert counter_delta({applied: 5.0}, {applied: 905.0}, "search") == 900.0
