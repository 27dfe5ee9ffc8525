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
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.connectors.apply import apply
from cdcsync.snapshot.source import bootstrap_from_source
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.position import checkpoint_dir
from tests.integration.followers import numbered_table, scenario
from tests.integration.resnapshot import lose_capture
from tests.support import execute, pg_admin, pg_connect, read_topic, uid, wait_streaming

ROWS = 20


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-resnapshot-tests")
    yield session
    session.stop()


# `make test` plays it on Postgres, `make chaos` on MariaDB too (the hour `make test` keeps to on CI).
@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])
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


def _log_running_xacts() -> None:
    """Make the slot builder look again: a checkpoint logs the running transactions."""
    with pg_admin() as admin:
        admin.execute("CHECKPOINT")


def test_a_transaction_spanning_a_new_connectors_snapshot_is_not_lost(spark: Any, tmp_path: Path) -> None:
    """A transaction open while Postgres makes the new slot consistent, committed after the snapshot.

    The slot is consistent once every transaction older than its builder's
    second phase has ended; one that started in that phase and writes before
    the consistent point P is not in the exported snapshot, is decoded whole,
    and is the first to commit after it: its events carry no
    ``lastCommitLsn``, and their own LSNs are below P, i.e. below the
    snapshot rows. Its update must still win over the snapshot's row.
    """
    t = f"span_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, ROWS)) as sc:
        sc.run_once()
        source = sc.config.sources[0]
        lose_capture(sc.config, source)

        older, younger, spanning = pg_connect(autocommit=False), pg_connect(autocommit=False), pg_connect()
        older.execute("SELECT txid_current()")  # the builder waits for this one first
        applying = threading.Thread(target=apply, args=(sc.config,))
        applying.start()
        with pg_connect() as conn:
            deadline = time.monotonic() + 120
            while (
                conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)).fetchone()
                is None
            ):
                assert time.monotonic() < deadline, "the connector never began creating its slot"
                time.sleep(0.2)
            younger.execute("SELECT txid_current()")  # started after the builder: waited for in its second phase
            older.commit()
            _log_running_xacts()
            time.sleep(1)
            spanning.execute("BEGIN")
            spanning.execute(f"UPDATE {t} SET v = 400 WHERE id = 8")  # written before P
            younger.commit()
            _log_running_xacts()
        applying.join(180)
        read_topic(source.topic(source.tables[0]), lambda rs: sum(r.op == "r" for r in rs) >= 2 * ROWS, timeout=180)
        wait_streaming(sc.config)
        spanning.execute("COMMIT")
        for conn in (older, younger, spanning):
            conn.close()

        events = read_topic(
            source.topic(source.tables[0]), lambda rs: any(r.key == {"id": 8} and r.op == "u" for r in rs)
        )
        update = next(r for r in events if r.key == {"id": 8} and r.op == "u")
        snapshot = next(r for r in reversed(events) if r.op == "r")
        assert update.value["source"]["sequence"].startswith("[null,"), "not the first transaction after the snapshot"
        assert update.value["source"]["lsn"] < snapshot.value["source"]["lsn"], "the transaction did not span P"

        sc.run_once()
        sc.assert_converged()
        for follower in ("search", "cache", "warehouse"):
            assert int(sc.held(follower, t)["8"][1]["v"]) == 400, follower
