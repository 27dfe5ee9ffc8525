"""`cdcsync lag --json` against a real follower: behind while it is stopped, 0 once it has caught up.

The follower runs in this process (``run_once``, as `cdcsync run --once`);
`cdcsync lag` runs as its own process, reading the follower's checkpoint and
Kafka, with no daemon.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.followers import numbered_table, scenario
from tests.support import execute, uid


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-tests-lag")
    yield session
    session.stop()


def lag_json(config_path: Path, *followers: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "lag", *followers, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def table_row(report: dict[str, Any], follower: str, table: str) -> dict[str, Any]:
    (found,) = [f for f in report["followers"] if f["follower"] == follower]
    (row,) = [t for t in found["tables"] if t["table"] == table]
    return dict(row)


def test_lag_of_a_stopped_follower_grows_then_returns_to_zero(spark: Any, tmp_path: Path) -> None:
    t = f"lag_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, 20)) as sc:
        config_path = tmp_path / "cdcsync.yaml"
        config_path.write_text(yaml.safe_dump(sc.raw))
        sc.run_once("cache")
        caught_up = table_row(lag_json(config_path, "cache"), "cache", f"public.{t}")
        assert (caught_up["offsets_behind"], caught_up["seconds_behind"]) == (0, 0.0), caught_up

        # The follower is stopped (no query runs); the source keeps changing for a few seconds.
        time.sleep(1.5)
        for i in range(30):
            execute("postgres", f"UPDATE {t} SET v = v + 1 WHERE id = {i % 20 + 1}")
            time.sleep(0.1)
        sc.caught_up()  # every change above is in Kafka
        report = lag_json(config_path, "cache")
        behind = table_row(report, "cache", f"public.{t}")
        assert behind["state"] == "behind"
        assert behind["offsets_behind"] >= 30, behind
        # the newest change was committed about 3 s after the last one applied (1.5 s + 30 x 0.1 s)
        assert behind["seconds_behind"] > 2, behind
        (part,) = behind["partitions"]
        assert part["log_end"] - part["position"] == behind["offsets_behind"]
        assert part["newest_commit_ms"] > part["applied_commit_ms"]
        (source,) = report["sources"]
        assert source["state"] in ("capturing", "idle"), source  # it heartbeats: not stalled
        assert source["heartbeat_age_s"] < 30 and source["capture_lag_s"] < 30, source
        assert source["slot_retained_wal_bytes"] is not None and source["slot_retained_wal_bytes"] >= 0
        assert report["problems"] == [], report["problems"]
        # The other followers never ran: the whole log is ahead of them.
        assert table_row(report := lag_json(config_path), "search", f"public.{t}")["offsets_behind"] > 30

        sc.run_once("cache")
        after = table_row(lag_json(config_path, "cache"), "cache", f"public.{t}")
        assert (after["offsets_behind"], after["seconds_behind"], after["state"]) == (0, 0.0, "caught up"), after
