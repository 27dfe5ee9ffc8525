"""`bootstrap --from topics`: a new follower fills its store up to captured offsets, then streams from exactly there.

The source keeps taking writes (a few hundred changes/s) throughout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.errors import FatalError
from cdcsync.snapshot import parallel, replay
from cdcsync.snapshot.bootstrap import bootstrap_from_topics
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.stream import checkpoint_dir, start_file, start_query
from tests.integration.followers import assert_first_batch_from, numbered_table, scenario, writing
from tests.support import execute, killing_a_child_process, uid


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-bootstrap-tests")
    yield session
    session.stop()


@pytest.mark.parametrize(("kind", "processes"), [("postgres", 1), ("mariadb", 1), ("postgres", 2)])
def test_bootstrap_under_writes_then_stream_from_the_recorded_offsets(
    spark: Any, tmp_path: Path, kind: str, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``processes=2``: every follower replays the log in two processes (``snapshot.parallel``), slices of 1,000
    offsets; the warehouse's write files the publish loads (``delta_load``), Elasticsearch and Redis their stores."""
    shared: list[str] = []
    if processes > 1:
        replay_shared = replay.replay_shared
        monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
        monkeypatch.setattr(replay, "SLICE_RECORDS", 1000)
        monkeypatch.setattr(parallel, "PROCESSES", processes)
        monkeypatch.setattr(
            replay,
            "replay_shared",
            lambda config, follower, *a: (shared.append(follower.name), replay_shared(config, follower, *a)),
        )
    t = f"boot_{uid()}"
    namespace = "public" if kind == "postgres" else "inventory"
    with scenario(spark, tmp_path, {kind: [f"{namespace}.{t}"]}, numbered_table(t, 3000, kind)) as sc:
        execute(kind, f"UPDATE {t} SET v = -v WHERE id % 7 = 0", f"DELETE FROM {t} WHERE id % 11 = 0")
        sc.caught_up()
        with writing(t, 3000, kind):
            time.sleep(2)
            for cfg in sc.config.followers:
                follower = build_follower(sc.config, cfg, spark)
                summary = bootstrap_from_topics(
                    sc.config, cfg, follower, checkpoint_dir(sc.config, cfg), base_dir(sc.config)
                )
                assert summary.records > 3000 and summary.dead_lettered == 0
                recorded = json.loads(start_file(base_dir(sc.config), cfg.name).read_text())["offsets"]
                assert recorded == summary.offsets
                # The stream's first batch starts exactly where the bootstrap stopped.
                query = start_query(spark, sc.config, cfg, follower, once=True)
                query.awaitTermination(600)
                assert query.exception() is None
                assert_first_batch_from(sc.config, cfg, follower, query, recorded)
                sc.followers[cfg.name] = follower
                with pytest.raises(FatalError, match="already has a checkpoint"):
                    bootstrap_from_topics(sc.config, cfg, follower, checkpoint_dir(sc.config, cfg), base_dir(sc.config))
        sc.run_once()
        sc.assert_converged()
    if processes > 1:
        assert sorted(shared) == sorted(cfg.name for cfg in sc.config.followers)


def test_bootstrap_command_json_summary_and_a_rerun_before_streaming(spark: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    t = f"bootcli_{uid()}"
    ddl = {"mariadb": [f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT NOT NULL)"]}
    with scenario(spark, tmp_path, {"mariadb": [f"inventory.{t}"]}, ddl) as sc:
        execute("mariadb", *(f"INSERT INTO {t} VALUES ({i}, {i})" for i in range(1, 501)))
        sc.caught_up()
        config_path = tmp_path / "cdcsync.yaml"
        config_path.write_text(yaml.safe_dump(sc.raw))
        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path), "bootstrap", "cache", "--json"]
        first = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        summary = json.loads(first.stdout)
        assert summary["applied"] == 500 + 1 and summary["dead_lettered"] == 0  # 500 rows and one tick
        assert "records" in first.stderr and "ETA" in first.stderr  # progress on stderr
        # A bootstrap that was interrupted before streaming began is simply run again.
        execute("mariadb", f"UPDATE {t} SET v = 0 WHERE id <= 10")
        sc.caught_up()
        again = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        rerun = json.loads(again.stdout)
        # It rebuilds the store in a new generation (nothing of the first run is reused) and publishes that.
        assert rerun["applied"] == 500 + 2 and rerun["dead_lettered"] == 0  # 500 rows and two ticks
        sc.run_once("cache")
        assert not [r.as_dict() for r in sc.verify() if r.follower == "cache" and not r.clean]


def test_a_replay_process_killed_mid_bootstrap_fails_it_loudly(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay process that dies (out of memory, killed) fails the bootstrap with an error naming the follower;
    nothing waits for its slice for ever, and nothing is published or recorded."""
    monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
    monkeypatch.setattr(replay, "SLICE_RECORDS", 500)
    t = f"boot_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, 3000)) as sc:
        sc.caught_up()
        cfg = next(c for c in sc.config.followers if c.kind == "redis")
        follower = build_follower(sc.config, cfg, spark)
        with killing_a_child_process() as killed:
            with pytest.raises(FatalError, match=f"follower {cfg.name}: a replay process ended"):
                bootstrap_from_topics(sc.config, cfg, follower, checkpoint_dir(sc.config, cfg), base_dir(sc.config))
        assert killed
        assert not start_file(base_dir(sc.config), cfg.name).exists()
