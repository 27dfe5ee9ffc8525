"""`bootstrap --from source`: a consistent read of the database, aligned with the change log.

The connectors start with ``snapshot_mode: no_data``, so the topics hold only
what changed after capture began: a bootstrap from the topics would miss every
older row. The source takes a few hundred changes/s throughout.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.config import SourceConfig
from cdcsync.errors import FatalError
from cdcsync.snapshot.source import bootstrap_from_source
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.stream import checkpoint_dir, start_file
from tests.integration.followers import Scenario, scenario
from tests.support import execute, killing_a_child_process, maria_connect, pg_connect, uid

ROWS = 4000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-bootstrap-source-tests")
    yield session
    session.stop()


class Writer(threading.Thread):
    """Inserts and updates in small transactions until stopped: a few hundred changes/s."""

    def __init__(self, kind: str, table: str) -> None:
        super().__init__(daemon=True)
        self.kind, self.table = kind, table
        self.stop, self.errors, self.changes = threading.Event(), [], 0

    def run(self) -> None:
        i = 100_000
        try:
            while not self.stop.is_set():
                i += 1
                execute(
                    self.kind,
                    f"INSERT INTO {self.table} VALUES ({i}, {i}, 'w')",
                    f"UPDATE {self.table} SET v = v + 1 WHERE id = {i % ROWS + 1}",
                )
                self.changes += 2
                time.sleep(0.005)
        except BaseException as err:
            self.errors.append(err)

    def __enter__(self) -> Writer:
        self.start()
        time.sleep(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()
        assert not self.errors, self.errors


def _ddl(kind: str, t: str) -> list[str]:
    series = (
        f"SELECT g, g, 'seed' FROM generate_series(1, {ROWS}) g"
        if kind == "postgres"
        else f"SELECT seq, seq, 'seed' FROM seq_1_to_{ROWS}"
    )
    return [
        f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))",
        f"INSERT INTO {t} {series}",
    ]


def _seeded(spark: Any, tmp_path: Path, kind: str, t: str) -> Any:
    """A table ``t`` of ROWS rows, captured from now on (the topics never see the seed rows)."""
    namespace = "public" if kind == "postgres" else "inventory"
    tables, ddl = {kind: [f"{namespace}.{t}"]}, {kind: _ddl(kind, t)}
    return scenario(spark, tmp_path, tables, ddl, source_options={"snapshot_mode": "no_data"})


def _bootstrap_all(sc: Scenario, spark: Any, **kwargs: Any) -> dict[str, Any]:
    summaries = {}
    for cfg in sc.config.followers:
        follower = build_follower(sc.config, cfg, spark, open_sink=False)
        summary = bootstrap_from_source(
            sc.config, cfg, follower, spark, checkpoint_dir(sc.config, cfg), base_dir(sc.config), **kwargs
        )
        assert summary.dead_lettered == 0
        recorded = json.loads(start_file(base_dir(sc.config), cfg.name).read_text())
        assert recorded["offsets"] == summary.offsets and recorded["from"] == "source"
        sc.followers[cfg.name] = follower
        summaries[cfg.name] = summary
    return summaries


@pytest.mark.parametrize(("kind", "processes"), [("postgres", 1), ("mariadb", 1), ("postgres", 2), ("mariadb", 2)])
def test_bootstrap_from_source_under_writes_converges(
    spark: Any, tmp_path: Path, kind: str, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``processes=2``: every follower maps and writes the table's pieces of 250 rows in two processes
    (``snapshot.parallel``), each piece with its read's versions (the warehouse's into the files its publish loads)."""
    copied: list[tuple[str, int]] = []
    if processes > 1:
        from cdcsync.snapshot import jdbc, parallel, table_copy

        monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
        monkeypatch.setattr(parallel, "PROCESSES", processes)
        monkeypatch.setattr(jdbc, "ROWS_PER_PIECE", 250)
        copy_in_processes = table_copy.copy_in_processes

        def counted(source_name: str, plan: Any, reads: Any, processes: Any, next_batch: Any, add: Any) -> None:
            rows: list[int] = []
            copy_in_processes(
                source_name, plan, reads, processes, next_batch, lambda c: (rows.append(c.records), add(c))
            )
            copied.append((processes.name, sum(rows)))

        monkeypatch.setattr(table_copy, "copy_in_processes", counted)
    t = f"bsrc_{uid()}"
    with _seeded(spark, tmp_path, kind, t) as sc:
        execute(kind, f"UPDATE {t} SET v = -v WHERE id % 7 = 0", f"DELETE FROM {t} WHERE id % 11 = 0")
        with Writer(kind, t):
            summaries = _bootstrap_all(sc, spark)
        # Every seed row came from the read, not the topics (which never saw most of them).
        assert all(s.applied >= ROWS - ROWS // 11 for s in summaries.values()), summaries
        sc.run_once()
        sc.assert_converged()
    if processes > 1:  # the seed table went through the processes, every row of its read counted
        seeded = [(name, rows) for name, rows in copied if rows >= ROWS - ROWS // 11]
        assert sorted(n for n, _rows in seeded) == sorted(cfg.name for cfg in sc.config.followers)


def test_a_transaction_spanning_the_snapshot_is_not_lost(spark: Any, tmp_path: Path) -> None:
    """It began before the snapshot, so its changes carry LSNs from before it; it commits after."""
    t = f"bspan_{uid()}"
    with _seeded(spark, tmp_path, "postgres", t) as sc:
        spanning = pg_connect(autocommit=False)
        spanning.execute(f"UPDATE {t} SET v = -777, note = 'span' WHERE id = 1")
        spanning.execute(f"INSERT INTO {t} VALUES (99999, 1, 'span')")
        spanning.execute(f"DELETE FROM {t} WHERE id = 2")
        committed = []

        def commit_once_the_read_is_open(_source: SourceConfig) -> None:
            if not committed:
                spanning.commit()
                committed.append(True)

        with Writer("postgres", t):
            _bootstrap_all(sc, spark, on_read_open=commit_once_the_read_is_open)
        spanning.close()
        sc.run_once()
        sc.assert_converged()
        for name, target in (("search", t), ("cache", t)):
            held = sc.held(name, target)
            assert int(held["1"][1]["v"]) == -777 and "99999" in held and "2" not in held, name


def test_mariadb_rows_carry_the_gtid_of_their_read(spark: Any, tmp_path: Path) -> None:
    """A row read at GTID seq s holds version s << 16 | 0xFFFF: an older change replayed later is a no-op."""
    t = f"bgtid_{uid()}"
    with _seeded(spark, tmp_path, "mariadb", t) as sc:
        execute("mariadb", f"UPDATE {t} SET v = 5 WHERE id = 3")
        with maria_connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            seq_after_update = int(cur.fetchone()[0].split("-")[2])
        _bootstrap_all(sc, spark)
        version, doc = sc.held("cache", t)["3"]
        assert int(doc["v"]) == 5
        assert version >> 16 >= seq_after_update and version & 0xFFFF == 0xFFFF
        sc.run_once()
        sc.assert_converged()


def test_a_slow_store_holds_back_the_table_read(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reads run at most ``partitions`` pieces ahead of the writes: a table is never read whole into memory."""
    from cdcsync.snapshot import jdbc, table_copy

    monkeypatch.setattr(jdbc, "ROWS_PER_PIECE", 250)  # 16 pieces
    monkeypatch.setattr(table_copy, "BATCH_ROWS", 250)  # a write per piece
    real_read, reads = jdbc._read_piece, []
    t = f"bahead_{uid()}"
    # Counts this table's reads, and reads for real (the scenario's heartbeat table is read too).
    monkeypatch.setattr(jdbc, "_read_piece", lambda *a: (t in a[2] and reads.append(a[3])) or real_read(*a))
    with _seeded(spark, tmp_path, "postgres", t) as sc:
        cfg = next(c for c in sc.config.followers if c.kind == "redis")
        follower = build_follower(sc.config, cfg, spark, open_sink=False)
        apply_rows, read_while_stuck = follower.apply_rows, []

        def first_write_stuck(batch_id: int, *args: Any) -> Any:
            if batch_id == 0:  # the store takes its time over the first chunk; the table reader must wait for it
                time.sleep(4)
                read_while_stuck.append(len(reads))
            return apply_rows(batch_id, *args)

        follower.apply_rows = first_write_stuck  # type: ignore[method-assign]
        summary = bootstrap_from_source(
            sc.config, cfg, follower, spark, checkpoint_dir(sc.config, cfg), base_dir(sc.config), partitions=2
        )
        assert len(reads) == 16 and summary.applied == ROWS, (reads, summary)
        # Written: chunk 0 (stuck) and 1; mapped and waiting: chunk 2; read ahead: 2 pieces; 16 without a bound.
        assert read_while_stuck[0] <= 5, read_while_stuck
        sc.followers[cfg.name] = follower
        held = sc.held(cfg.name, t)
        assert len(held) == ROWS and all(int(doc["v"]) == int(i) for i, (_v, doc) in held.items())


def test_a_copy_process_killed_mid_bootstrap_fails_it_loudly(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process writing the table's pieces that dies (out of memory, killed) fails the bootstrap with an error
    naming the follower; nothing waits for its piece for ever, and nothing is published or recorded."""
    from cdcsync.snapshot import jdbc, parallel

    monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
    monkeypatch.setattr(jdbc, "ROWS_PER_PIECE", 250)
    t = f"bkill_{uid()}"
    with _seeded(spark, tmp_path, "postgres", t) as sc:
        cfg = next(c for c in sc.config.followers if c.kind == "elasticsearch")
        follower = build_follower(sc.config, cfg, spark, open_sink=False)
        with killing_a_child_process() as killed:
            with pytest.raises(FatalError, match=f"follower {cfg.name}: a replay process ended"):
                bootstrap_from_source(
                    sc.config, cfg, follower, spark, checkpoint_dir(sc.config, cfg), base_dir(sc.config)
                )
        assert killed
        assert not start_file(base_dir(sc.config), cfg.name).exists()
        reader = build_follower(sc.config, cfg, spark, open_sink=False)  # what readers see: the alias
        assert not reader.sink.held(t)  # the staged index was never published
