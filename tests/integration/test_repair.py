"""Divergence planted in each store while a writer runs: verify names exactly it, repair converges it.

A real `cdcsync run` follows a Postgres table into Elasticsearch, Redis and
Delta while a writer changes it a few hundred times a second. Into each store
the test writes as a stray client would, before the writer starts: a document
edited, one deleted, one set back to older content, one row the source never
had. The writer never touches those rows. `verify` (whose
re-check must not report the rows the writer has in flight) lists those and
nothing else; the source then deletes one divergent key and updates another,
and `repair --from` the report converges every store through the log: the
newest state wins, and `verify` is clean.

Then the daemon's own background pass, with ``auto_repair``: a divergence
planted in Redis under the writer shows in /metrics within a period and in
`status`, and is repaired with no command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from elasticsearch import Elasticsearch

from cdcsync.events import Change
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.mapping import Row
from cdcsync.sync.sinks import build_sink
from tests.integration.followers import Scenario, numbered_table, scenario, writing
from tests.integration.test_lag_metrics import free_port, scrape
from tests.support import ENV, execute, uid

ROWS = 2000  # the writer updates ids 1..ROWS; 3001.. are left to the test
PLANTED = {"stale": ["3001", "3003", "3005"], "missing": ["3002", "3004"], "extra": ["900001"]}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-test-repair")
    yield session
    session.stop()


def cli(command: list[str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout)


def until(what: str, holds: Callable[[], bool], within_s: float, log: Path) -> None:
    deadline = time.monotonic() + within_s
    while not holds():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within_s} s\n{log.read_text()[-3000:]}")
        time.sleep(3)


def opened(sc: Scenario, follower: str, spark: Any) -> Any:
    sink = build_sink(sc.config, sc.config.follower(follower), spark)
    sink.open(list(mappings_for(sc.config, sc.config.follower(follower)).values()))
    return sink


def plant_search(sc: Scenario, target: str) -> None:
    sink = opened(sc, "search", None)
    alias, es = sink.index_of(target), Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
    held = {i: es.get(index=alias, id=i) for i in ("3001", "3003", "3005")}
    for ident in ("3001", "3005"):  # edited: a stray client's write, versioned by Elasticsearch itself
        es.index(index=alias, id=ident, document={**held[ident]["_source"], "v": -1}, refresh=True)
    for ident in ("3002", "3004"):
        es.delete(index=alias, id=ident, refresh=True)
    old = held["3003"]  # set back to older content at the version it holds
    es.index(index=alias, id="3003", document={**old["_source"], "v": 3003}, version=old["_version"],
             version_type="external_gte", refresh=True)  # fmt: skip
    sink.write(0, [stray(sc, target, 900001)])
    sink.make_visible([target])
    sink.close()
    es.close()


def plant_cache(sc: Scenario, target: str) -> None:
    sink = opened(sc, "cache", None)
    r, head = redis.Redis(port=int(ENV["REDIS_PORT"]), decode_responses=True), f"{sink.prefix}:{target}:"
    r.hset(head + "3001", "v", "-1")
    r.hset(head + "3005", "v", "-1")
    r.delete(head + "3002", head + "3004")
    version = int(r.hget(head + "3003", "_v") or 0)
    r.hset(head + "3003", mapping={"v": "3003", "_v": str(version - 1)})
    sink.write(0, [stray(sc, target, 900001)])
    sink.close()
    r.close()


def plant_warehouse(sc: Scenario, target: str, spark: Any) -> None:
    from delta.tables import DeltaTable

    sink = opened(sc, "warehouse", spark)
    path = f"{sc.config.follower('warehouse').path}/{target}"
    edits: list[Callable[[Any], None]] = [
        lambda t: t.update("_cdcsync_id IN ('3001', '3005')", {"v": "-1"}),
        lambda t: t.delete("_cdcsync_id IN ('3002', '3004')"),
        lambda t: t.update("_cdcsync_id = '3003'", {"v": "3003", "_cdcsync_version": "_cdcsync_version - 1"}),
    ]
    for edit in edits:
        edit(DeltaTable.forPath(spark, path))
    sink.write(0, [stray(sc, target, 900001)])
    sink.close()


def stray(sc: Scenario, target: str, ident: int) -> Row:
    """A row the source never had, written at a low version."""
    source = sc.config.sources[0]
    doc = {"id": ident, "v": 1}
    change = Change(source.name, "public.x", "c", {"id": ident}, doc, None, 5, "stray", 0, 0)
    return Row(change, target, str(ident), doc)


@pytest.mark.long  # ~6 minutes: `make chaos` runs it; `make test` keeps the daemon's repairs through the log below
def test_divergence_planted_under_writes_is_found_exactly_and_repaired_through_the_log(
    spark: Any, tmp_path: Path
) -> None:
    t = f"rep_{uid()}"
    ddl = numbered_table(t, ROWS)
    ddl["postgres"].append(f"INSERT INTO {t} SELECT g, g FROM generate_series(3001, 3005) g")
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
        config_path, log = tmp_path / "cdcsync.yaml", tmp_path / "run.log"
        config_path.write_text(yaml.safe_dump(sc.raw))
        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path)]
        daemon = subprocess.Popen([*command, "run"], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
        try:
            until("the stores converged", lambda: cli(command, "verify").returncode == 0, 600, log)
            execute("postgres", f"UPDATE {t} SET v = v + 10000 WHERE id = 3003")  # so that 3003 has an older state
            until("3003 updated", lambda: cli(command, "verify").returncode == 0, 300, log)
            plant_search(sc, t)
            plant_cache(sc, t)
            plant_warehouse(sc, t, spark)  # before the writer: the daemon's MERGEs would conflict with its edits
            with writing(t, ROWS):
                reports = {}
                for follower in ("search", "cache", "warehouse"):
                    found = cli(command, "verify", follower, "--json")
                    assert found.returncode == 1, (found.stdout, found.stderr)
                    report = next(r for r in json.loads(found.stdout) if r["table"].endswith(t))
                    listed = {kind: report[kind] for kind in PLANTED}
                    assert listed == PLANTED, (follower, report)  # the writer's rows in flight are not listed
                    assert report["source_rows"] >= ROWS + 5
                    reports[follower] = tmp_path / f"{follower}.json"
                    reports[follower].write_text(found.stdout)
                # Meanwhile the source deletes a key missing from the stores and updates a stale one.
                execute("postgres", f"DELETE FROM {t} WHERE id = 3004", f"UPDATE {t} SET v = 5555 WHERE id = 3005")
                for follower, report_file in reports.items():
                    done = cli(command, "repair", follower, "--from", str(report_file), "--json", "--timeout", "300")
                    assert done.returncode == 0, (follower, done.stdout, done.stderr[-3000:], log.read_text()[-3000:])
                    summary = json.loads(done.stdout)
                    assert summary["clean"], summary
                    repaired = next(d for d in summary["repaired"] if d["table"].endswith(t))
                    assert (repaired["asked"], repaired["removed"], repaired["whole_table"]) == (5, 1, False), summary
            until("verify clean after the writer stopped", lambda: cli(command, "verify").returncode == 0, 300, log)
            for follower in ("search", "cache"):
                held = {ident: doc for ident, (_v, doc) in opened(sc, follower, None).held(t).items()}
                assert "3004" not in held and "900001" not in held
                assert str(held["3005"]["v"]) == "5555" and str(held["3001"]["v"]) == "3001"
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(120) == 0, log.read_text()[-3000:]
        finally:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGKILL)


@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])  # MariaDB: make chaos
def test_the_daemon_finds_divergence_in_the_background_and_repairs_it_itself(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    t, namespace = f"rep_{uid()}", "public" if kind == "postgres" else "inventory"
    ddl = numbered_table(t, ROWS, kind)
    more = "g, g FROM generate_series(3001, 3005) g" if kind == "postgres" else "seq, seq FROM seq_3001_to_3005"
    ddl[kind].append(f"INSERT INTO {t} SELECT {more}")
    with scenario(spark, tmp_path, {kind: [f"{namespace}.{t}"]}, ddl) as sc:
        for follower in sc.raw["followers"]:
            follower["verify"] = {"period_s": 30, "rows_per_s": 5000, "auto_repair": True}
        config_path, log, port = tmp_path / "cdcsync.yaml", tmp_path / "run.log", free_port()
        config_path.write_text(yaml.safe_dump(sc.raw))
        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path)]
        daemon = subprocess.Popen([*command, "run", "--metrics-port", str(port), "cache"], stdout=open(log, "ab"),
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        table = f"{sc.config.sources[0].name}.{namespace}.{t}"

        def divergent() -> float | None:
            return scrape(port).get(("cdcsync_verify_divergent_rows", (("follower", "cache"), ("table", table))))

        try:
            until("a clean background pass", lambda: divergent() == 0, 300, log)
            with writing(t, ROWS, kind):
                plant_cache(sc, t)
                until("the divergence found by a pass", lambda: (divergent() or 0) > 0, 120, log)
                status = cli(command, "status", "--json", "--metrics-port", str(port), timeout=120)
                assert status.returncode == 1 and f"cdcsync repair cache --table {table}" in status.stdout, (
                    status.stdout
                )
                until("repaired by the daemon, clean at the next pass", lambda: divergent() == 0, 180, log)
            assert "auto_repair" in log.read_text()
            until("verify clean", lambda: cli(command, "verify", "cache").returncode == 0, 300, log)
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(120) == 0, log.read_text()[-3000:]
        finally:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGKILL)
