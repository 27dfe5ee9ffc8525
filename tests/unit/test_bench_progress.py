"""bench.freshness reads Spark's progress lines out of the daemon's log: the median of each phase per follower."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bench.freshness import batch_phases


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
