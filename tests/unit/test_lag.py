"""Lag arithmetic on plain data: offsets and seconds behind, capture states, the exported gauges.

The same arithmetic against a real follower, Kafka and Postgres is in
tests/integration/test_lag.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
from prometheus_client import REGISTRY

from cdcsync import metrics
from cdcsync.cli.lag import render
from cdcsync.connectors.lag import SourceLag, heartbeat_time, stall_after_s
from cdcsync.sync.lag import FollowerLag, PartitionLag, TableLag, commit_times
from cdcsync.sync.lag_report import LagReport

NOW = 1_700_000_000_000


def test_offsets_behind_is_log_end_minus_position_never_negative() -> None:
    assert PartitionLag(0, 40, 0, 100).offsets_behind == 60
    assert PartitionLag(0, 100, 0, 100).offsets_behind == 0
    assert PartitionLag(0, 120, 0, 100).offsets_behind == 0  # beyond the end: a lost position, not negative lag
    assert PartitionLag(0, 5, 30, 100).offsets_behind == 70  # below the log start: it reads from the start
    assert PartitionLag(0, None, 10, 100).offsets_behind == 90  # no position yet: the whole log is ahead


def test_seconds_behind_compares_commit_times_of_applied_and_newest() -> None:
    assert PartitionLag(0, 40, 0, 100, applied_ms=NOW - 30_000, newest_ms=NOW).seconds_behind == 30.0
    # caught up: 0 whatever the commit times (an idle table is not a lagging one)
    assert PartitionLag(0, 100, 0, 100, applied_ms=NOW - 30_000, newest_ms=NOW).seconds_behind == 0.0
    # nothing applied yet: measured from the first change still to read
    assert PartitionLag(0, None, 0, 100, pending_ms=NOW - 5_000, newest_ms=NOW).seconds_behind == 5.0
    # behind, but the commit times could not be read: unknown, not 0
    assert PartitionLag(0, 40, 0, 100).seconds_behind is None
    # clocks: a newest change committed "before" the applied one never gives negative lag
    assert PartitionLag(0, 40, 0, 100, applied_ms=NOW, newest_ms=NOW - 1).seconds_behind == 0.0


def test_a_table_sums_offsets_and_takes_the_worst_partition() -> None:
    table = TableLag(
        "pg",
        "public.orders",
        "pg.public.orders",
        [
            PartitionLag(0, 10, 0, 15, applied_ms=NOW - 2_000, newest_ms=NOW),
            PartitionLag(1, 7, 0, 7),
            PartitionLag(2, 3, 0, 9, applied_ms=NOW - 9_000, newest_ms=NOW),
        ],
    )
    assert table.offsets_behind == 11
    assert table.seconds_behind == 9.0
    assert table.state == "behind"
    caught_up = TableLag("pg", "public.t", "pg.public.t", [PartitionLag(0, 5, 0, 5)])
    assert (caught_up.offsets_behind, caught_up.seconds_behind, caught_up.state) == (0, 0.0, "caught up")
    unknown = TableLag("pg", "public.t", "pg.public.t", [PartitionLag(0, 1, 0, 5)])
    assert unknown.seconds_behind is None


def source(**kw: int | None) -> SourceLag:
    return SourceLag("pg", "postgres", 1000, NOW, **kw)  # type: ignore[arg-type]


def test_idle_and_stuck_capture_look_different() -> None:
    limit = stall_after_s(1000)
    assert limit == 60.0 and stall_after_s(30_000) == 300.0
    idle = source(heartbeat_ms=NOW - 800, newest_change_ms=NOW - 3_600_000, newest_change_emitted_ms=NOW - 3_599_500)
    assert idle.state == "idle"
    assert idle.capture_lag_s == 0.8  # capture spoke after its last change: only the heartbeat's age counts
    stuck = source(
        heartbeat_ms=NOW - 600_000, newest_change_ms=NOW - 3_600_000, newest_change_emitted_ms=NOW - 3_599_500
    )
    assert stuck.state == "stalled" and stuck.capture_lag_s == 600.0
    assert source().state == "no heartbeat" and source().capture_lag_s is None


def test_busy_capture_lag_is_the_newest_change_delay() -> None:
    # A backlog: the newest change was committed 40 s before Debezium emitted it, after the last heartbeat.
    busy = source(heartbeat_ms=NOW - 2_000, newest_change_ms=NOW - 41_000, newest_change_emitted_ms=NOW - 1_000)
    assert busy.state == "capturing"
    assert busy.capture_lag_s == 40.0
    assert busy.heartbeat_age_s == 2.0 and busy.newest_change_age_s == 41.0


def test_commit_times_read_source_ts_ms_not_the_connector_clock() -> None:
    value = orjson.dumps({"op": "u", "ts_ms": NOW, "source": {"ts_ms": NOW - 700}, "after": {"id": 1}})
    assert commit_times(value) == (NOW - 700, NOW)
    assert commit_times(None) is None  # a tombstone
    assert commit_times(b"not json") is None
    assert commit_times(orjson.dumps({"op": "c", "source": {}})) is None
    assert heartbeat_time(b'{"ts_ms":1795372140538}', 5) == 1795372140538
    assert heartbeat_time(b"{}", 5) == 5  # no ts_ms: the record's own timestamp


def report() -> LagReport:
    tables = [
        TableLag("pg", "public.orders", "pg.public.orders", [PartitionLag(0, 40, 0, 100, NOW - 30_000, None, NOW)]),
        TableLag("pg", "public.items", "pg.public.items", [PartitionLag(0, 7, 0, 7), PartitionLag(1, 2, 0, 3)]),
    ]
    heartbeat = source(heartbeat_ms=NOW - 1_500, newest_change_ms=NOW - 2_000, newest_change_emitted_ms=NOW - 1_800)
    pg = SourceLag("pg", "postgres", 1000, NOW, heartbeat.heartbeat_ms, NOW - 2_000, NOW - 1_800, "slot_pg", 4096)
    return LagReport(NOW, [FollowerLag("unit_lag_cache", "checkpoint /x", tables)], [pg], ["topic x does not exist"])


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_the_report_sets_the_prometheus_gauges() -> None:
    metrics.record_lag(report())
    follower = "unit_lag_cache"
    assert sample("cdcsync_follower_offsets_behind", follower=follower, topic="pg.public.orders", partition="0") == 60
    assert sample("cdcsync_follower_offsets_behind", follower=follower, topic="pg.public.items", partition="1") == 1
    assert sample("cdcsync_follower_seconds_behind", follower=follower, table="public.orders") == 30.0
    assert sample("cdcsync_follower_seconds_behind", follower=follower, table="public.items") is None  # unknown
    assert sample("cdcsync_capture_lag_seconds", source="pg") == 1.5
    assert sample("cdcsync_slot_retained_wal_bytes", source="pg", slot="slot_pg") == 4096


def test_json_and_text_say_the_same() -> None:
    data = json.loads(json.dumps(report().as_dict()))
    orders = data["followers"][0]["tables"][0]
    assert (orders["offsets_behind"], orders["seconds_behind"], orders["state"]) == (60, 30.0, "behind")
    assert data["sources"][0]["state"] == "capturing" and data["sources"][0]["slot_retained_wal_bytes"] == 4096
    text = render(data)
    assert "public.orders" in text and "30 s" in text and "4.0 KiB" in text
    assert "! topic x does not exist" in text


def cdcsync(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdcsync", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_lag_and_status_help_is_instant_and_status_exits_1_without_a_daemon(tmp_path: Path) -> None:
    probe = (
        "import sys; from cdcsync.cli import main\n"
        "for cmd in ('lag', 'status'):\n"
        "    try:\n        main([cmd, '--help'])\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('pyspark', 'confluent_kafka', 'psycopg', 'elasticsearch') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "--watch" in done.stdout and "CDCSYNC_METRICS_PORT" in done.stdout
    assert "HEAVY []" in done.stdout
    # A follower whose store is there but no daemon runs it: not healthy, and the exit code says so.
    (tmp_path / "wh").mkdir()
    (tmp_path / "cdcsync.yaml").write_text(
        json.dumps({"followers": [{"name": "wh", "kind": "delta", "path": str(tmp_path / "wh")}]})
    )
    done = cdcsync("status", "--json", "--metrics-port", "9", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert not report["healthy"] and report["daemon"]["answers"] is False
    (problem,) = report["problems"]
    assert problem.startswith("follower wh: not running (no daemon answers at http://127.0.0.1:9;")
