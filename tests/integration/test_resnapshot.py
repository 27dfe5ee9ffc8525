"""Capture lost and re-created with a fresh snapshot: every follower converges on the real stack.

Rows stream to the three followers; then, with the followers stopped, each
source's connector is stopped, its offsets deleted and the connector deleted
(on Postgres its slot dropped too). While capture is gone, rows are changed,
inserted and deleted. The connector is applied again and snapshots afresh;
one more transaction streams after the snapshot; the followers run.

What a snapshot can carry must win over what the stores held from before
(snapshot rows, and the first transaction after them). What it cannot carry
is a delete: ``verify`` names those rows in every sink, and rebuilding the
follower from the source (``bootstrap --from source``) removes them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.connectors.apply import apply
from cdcsync.snapshot.source import bootstrap_from_source
from cdcsync.sync.position import base_dir, checkpoint_dir
from cdcsync.sync.stream import build_follower
from tests.integration.followers import numbered_table, scenario
from tests.integration.resnapshot import lose_capture
from tests.support import execute, read_topic, uid, wait_streaming

ROWS = 20


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-resnapshot-tests")
    yield session
    session.stop()


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_fresh_snapshot_after_capture_was_lost_converges_in_every_sink(spark: Any, tmp_path: Path, kind: str) -> None:
    t = f"resnap_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    kinds = {kind: t}
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, numbered_table(t, ROWS, kind)) as sc:
        for kind, t in kinds.items():
            for i in range(1, 11):  # the stores hold these at streamed versions
                execute(kind, f"UPDATE {t} SET v = {100 + i} WHERE id = {i}")
        sc.run_once()
        sc.assert_converged()

        for source in sc.config.sources:
            lose_capture(sc.config, source)
        for kind, t in kinds.items():
            execute(kind, f"UPDATE {t} SET v = 200 WHERE id <= 5")
            execute(kind, *(f"INSERT INTO {t} VALUES ({i}, {i})" for i in range(21, 26)))
            execute(kind, f"DELETE FROM {t} WHERE id BETWEEN 11 AND 13")
        apply(sc.config)
        for source in sc.config.sources:
            table = next(tb for tb in source.tables if not tb.table.startswith("tick_"))
            read_topic(source.topic(table), lambda rs: sum(r.op == "r" for r in rs) >= 2 * ROWS - 1, timeout=180)
        wait_streaming(sc.config)
        for kind, t in kinds.items():  # the first transaction after the new snapshot
            execute(kind, f"UPDATE {t} SET v = 300 WHERE id IN (6, 7)")
        sc.run_once()

        reports = sc.verify()
        assert len(reports) == 3 * 2  # three followers; the table and the tick table
        for report in reports:
            assert not report.missing and not report.stale, report.as_dict()
            deleted_in_gap = sorted(report.extra) == ["11", "12", "13"]
            assert deleted_in_gap if report.table.split(".")[-1] in kinds.values() else not report.extra, report
        for follower in ("search", "cache", "warehouse"):
            for t in kinds.values():
                held = sc.held(follower, t)
                assert int(held["1"][1]["v"]) == 200 and int(held["6"][1]["v"]) == 300 and "25" in held, (follower, t)

        # The repair verify leads to: rebuild each follower from the source.
        for cfg in sc.config.followers:
            shutil.rmtree(checkpoint_dir(sc.config, cfg), ignore_errors=True)
            follower = build_follower(sc.config, cfg, spark, open_sink=False)
            bootstrap_from_source(sc.config, cfg, follower, spark, checkpoint_dir(sc.config, cfg), base_dir(sc.config))
            sc.followers[cfg.name] = follower
        sc.run_once()
        sc.assert_converged()
