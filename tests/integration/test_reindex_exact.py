"""`reindex` makes each store equal its source: orphans and stale markers go, a killed run is finished, one at a time.

Every sink gets a live row the source does not have (its delete was
compacted away and the store missed it), a delete marker the rebuilt
generation does not have, and, where it matters, a marker with a wrong huge
version over a row the source holds. After a reindex none of them is left
and ``verify`` is clean. A reindex killed at each of its steps leaves readers
on a complete store and is finished by the next one; a second reindex of the
same follower is refused while one runs.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from elasticsearch import Elasticsearch

from cdcsync.config import Config
from cdcsync.events import Change
from cdcsync.snapshot import reindex as reindex_module
from cdcsync.snapshot.reindex import reindex
from cdcsync.snapshot.replay import Summary, capture, replay
from cdcsync.sync.build import build_follower
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.mapping import Row
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.verify.compare import TableReport, verify_follower
from tests.integration.followers import Scenario, numbered_table, scenario
from tests.support import ENV, execute, uid

ROWS = 200
HUGE = 10**18  # a marker version above every real one: it hides the row whatever the source says


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-reindex-exact-tests")
    yield session
    session.stop()


@contextmanager
def table_scenario(spark: Any, tmp_path: Path, rows: int = ROWS) -> Iterator[tuple[Scenario, str]]:
    t = f"rxe_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, rows)) as sc:
        yield sc, t


def planted_row(t: str, doc_id: str, version: int, doc: dict[str, Any] | None) -> Row:
    op = "d" if doc is None else "u"
    change = Change("planted", f"public.{t}", op, {"id": doc_id}, doc, None, version, "planted", 0, 0)
    return Row(change, t, doc_id, doc)


def plant(sc: Scenario, name: str, t: str, tag: str, hide: bool = False) -> list[str]:
    """Write an orphan row and a stale marker (and, with ``hide``, a huge marker over row 5) into the live store.

    Returns the planted ids, the hidden row's last.
    """
    cfg = sc.config.follower(name)
    sink = build_sink(sc.config, cfg, sc.spark)
    sink.open(list(mappings_for(sc.config, cfg).values()))
    try:
        rows = [
            planted_row(t, f"orphan-{tag}", 1, {"id": 900_000, "v": 1}),
            planted_row(t, f"marker-{tag}", 1, None),
        ]
        if hide:
            five = next(i for i, (_v, doc) in sink.held(t).items() if str(doc.get("id")) == "5")
            rows.append(planted_row(t, five, HUGE, None))
        result = sink.write(0, rows)
        assert result.applied == len(rows) and not result.rejected, result
    finally:
        sink.close()
    return [row.doc_id for row in rows]


def present(sc: Scenario, name: str, t: str, ids: list[str]) -> list[str]:
    """Which planted rows or markers the live store still holds (a row, or a marker, under that id)."""
    cfg = sc.config.follower(name)
    planted = ("1", str(HUGE))
    if cfg.kind == "redis":
        client = redis.Redis(port=int(ENV["REDIS_PORT"]), decode_responses=True)
        markers = client.hgetall(f"{cfg.prefix}:_deleted:{t}")
        found = [i for i in ids if client.hget(f"{cfg.prefix}:{t}:{i}", "_v") in planted or markers.get(i) in planted]
        client.close()
        return found
    if cfg.kind == "elasticsearch":
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        alias = f"{cfg.prefix}{t}"
        found = []
        for i in ids:
            doc = es.options(ignore_status=404).get(index=alias, id=i)
            if doc.get("found") and (doc["_source"].get("cdcsync_version") in (1, HUGE)):
                found.append(i)
        return found
    table = sc.spark.read.format("delta").load(f"{cfg.path}/{t}")
    rows = table.where(table["_cdcsync_id"].isin(ids)).collect()
    return sorted(r["_cdcsync_id"] for r in rows if r["_cdcsync_version"] in (1, HUGE))


def recorded_step(sc: Scenario, name: str) -> str | None:
    """The step the follower's last reindex recorded (docs/reindex.md), None if it recorded nothing."""
    path = Path(str(sc.config.state_dir)) / "reindex" / f"{name}.json"
    return json.loads(path.read_text())["step"] if path.exists() else None


def reports(config: Config, spark: Any, name: str) -> list[TableReport]:
    cfg = config.follower(name)
    return verify_follower(config, cfg, build_sink(config, cfg, spark))


def dirty(config: Config, spark: Any, name: str) -> list[dict[str, Any]]:
    return [r.as_dict() for r in reports(config, spark, name) if not r.clean]


def test_reindex_drops_orphans_resets_markers_and_applies_a_mapping_change_in_every_sink(
    spark: Any, tmp_path: Path
) -> None:
    with table_scenario(spark, tmp_path) as (sc, t):
        sc.run_once()
        planted = {cfg.name: plant(sc, cfg.name, t, "a", hide=True) for cfg in sc.config.followers}
        for cfg in sc.config.followers:  # what verify saw before: the orphan as extra, row 5 missing
            (report,) = [r for r in reports(sc.config, spark, cfg.name) if r.target == t]
            assert (report.extra, report.missing) == ([planted[cfg.name][0]], [planted[cfg.name][2]]), report
        # The reindex also applies a mapping change: column v is renamed.
        raw = copy.deepcopy(sc.raw)
        for follower in raw["followers"]:
            follower["mappings"] = {f"public.{t}": {"rename": {"v": "value"}}}
        renamed = Config.model_validate(raw)
        left, unclean = {}, {}
        for cfg in renamed.followers:
            reindex(renamed, cfg, spark)
            left[cfg.name] = present(sc, cfg.name, t, planted[cfg.name])
            unclean[cfg.name] = dirty(renamed, spark, cfg.name)
        assert left == {"search": [], "cache": [], "warehouse": []}
        assert unclean == {"search": [], "cache": [], "warehouse": []}


# Where a kill lands: the n-th call of `replay` in snapshot/reindex.py (1 fill, 2 catch-up to E1b,
# 3 catch-up after the switch), or right after `publish` switched readers, before that is recorded.
KILLS = {"fill": ("replay", 1), "catch-up": ("replay", 2), "publish": ("publish", 1), "final catch-up": ("replay", 3)}
RECORDED = {"fill": "staging", "catch-up": "staging", "publish": "publishing", "final catch-up": "published"}


def daemon_change(sc: Scenario, name: str, t: str, row: int) -> None:
    """A source change that the running follower applies to the live store (while the reindex is not switched)."""
    cfg = sc.config.follower(name)
    topics = sorted(mappings_for(sc.config, cfg))
    before = {tp: high for tp, (_low, high) in capture(sc.config, topics).items()}
    execute("postgres", f"UPDATE {t} SET v = v + 1000 WHERE id = {row}")
    sc.caught_up()
    after = {tp: high for tp, (_low, high) in capture(sc.config, topics).items()}
    follower = build_follower(sc.config, cfg, sc.spark)  # the live store, as the daemon writes it
    try:
        replay(sc.config, follower, before, after, Summary(name))
    finally:
        follower.sink.close()


@contextmanager
def killed_at(monkeypatch: pytest.MonkeyPatch, step: str, before_publish: Callable[[], None]) -> Iterator[None]:
    """Make the reindex raise KeyboardInterrupt at ``step`` (KILLS); ``before_publish`` runs as the switch nears."""
    which, nth = KILLS[step]
    calls = {"replay": 0, "publish": 0}
    real_replay, real_publish = reindex_module.replay, reindex_module.publish

    def fake_replay(*args: Any, **kwargs: Any) -> None:
        calls["replay"] += 1
        if which == "replay" and calls["replay"] == nth:
            raise KeyboardInterrupt(f"killed at {step}")
        real_replay(*args, **kwargs)

    def fake_publish(*args: Any, **kwargs: Any) -> None:
        before_publish()
        real_publish(*args, **kwargs)
        if which == "publish":
            raise KeyboardInterrupt(f"killed at {step}")

    with monkeypatch.context() as patch:
        patch.setattr(reindex_module, "replay", fake_replay)
        patch.setattr(reindex_module, "publish", fake_publish)
        with pytest.raises(KeyboardInterrupt):
            yield


@pytest.mark.parametrize(
    "name",
    # `make test` kills one sink's reindex at each step; `make chaos` all three (minutes each).
    [pytest.param("search", marks=pytest.mark.long), "cache", pytest.param("warehouse", marks=pytest.mark.long)],
)
def test_a_reindex_killed_at_each_step_is_finished_by_the_next(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    with table_scenario(spark, tmp_path) as (sc, t):
        sc.run_once(name)
        cfg = sc.config.follower(name)
        for n, step in enumerate(KILLS):
            ids = plant(sc, name, t, f"k{n}")
            with killed_at(monkeypatch, step, functools.partial(daemon_change, sc, name, t, 10 + n)):
                reindex(sc.config, cfg, spark)
            assert recorded_step(sc, name) == RECORDED[step], step
            # Readers are on a store complete up to E1b at least: the old one, or the new one lacking at most
            # the daemon's changes between E1b and the switch (Elasticsearch, Delta): here the tick it inserted.
            for report in reports(sc.config, spark, name):
                lost = set(report.missing) - ({str(sc.ticks)} if report.target != t else set())
                assert not lost, (step, report.as_dict())
            # A run of the same scope rebuilds everything; a narrower one (--table t, not the tick table)
            # finishes the killed run first, here by a catch-up from its recorded E1b.
            summary = reindex(sc.config, cfg, spark, table=t if step == "final catch-up" else None)
            assert present(sc, name, t, ids) == [], step
            assert dirty(sc.config, spark, name) == [], step
            assert recorded_step(sc, name) == "done" and summary.finished, step
        client = redis.Redis(port=int(ENV["REDIS_PORT"]))
        assert not list(client.scan_iter(f"{sc.tag}~*"))  # no staged generation nor journal left
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        alias = f"{sc.tag}-{t}"
        if name == "search":
            assert list(es.indices.get(index=f"{alias}-*")) == list(es.indices.get_alias(name=alias))
        if name == "warehouse":
            assert not Path(f"{cfg.path}/{t}__staging").exists()


def test_a_second_reindex_is_refused_while_one_runs_and_a_killed_one_is_run_again(spark: Any, tmp_path: Path) -> None:
    with table_scenario(spark, tmp_path, rows=20_000) as (sc, t):
        sc.run_once("cache")
        ids = plant(sc, "cache", t, "s")
        config_path = tmp_path / "cdcsync.yaml"
        config_path.write_text(yaml.safe_dump(sc.raw))
        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path)]
        client = redis.Redis(port=int(ENV["REDIS_PORT"]))
        first = subprocess.Popen([*command, "reindex", "cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            # Its stage has begun: the journal it opens (one key). A SCAN for its staged keys walks the whole
            # database, which earlier tests fill; in one run of the suite that walk outlasted the 20,000-row fill,
            # and the reindex was stopped while publishing.
            while not client.exists(f"{sc.config.follower('cache').prefix}~written:{t}"):
                assert first.poll() is None and time.monotonic() < deadline, first.communicate()
                time.sleep(0.005)
            os.kill(first.pid, signal.SIGSTOP)  # frozen mid-reindex, its lock held
            for args in (["reindex", "cache"], ["bootstrap", "cache"]):
                second = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)
                assert second.returncode == 1, (args, second.returncode, second.stderr)
                assert "follower cache" in second.stderr and f"pid {first.pid}" in second.stderr, second.stderr
        finally:
            first.kill()  # SIGKILL: no cleanup runs; the OS drops the lock
            with suppress(ProcessLookupError):
                os.kill(first.pid, signal.SIGCONT)
            first.communicate()
        assert recorded_step(sc, "cache") == "staging"  # killed during its fill, and that is on record
        again = subprocess.run([*command, "reindex", "cache", "--json"], capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert present(sc, "cache", t, ids) == []
        assert not list(client.scan_iter(f"{sc.tag}~*"))
        assert dirty(sc.config, spark, "cache") == []
        assert json.loads(again.stdout)["finished"] and "earlier reindex was killed" in again.stderr
        assert recorded_step(sc, "cache") == "done"


def test_a_reindex_killed_after_its_switch_is_finished_when_the_daemon_starts_the_follower(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon applied a change to the old index just before the switch; the run died before its catch-up.

    Readers are then on the new index without that change, and the daemon's
    own position is past it: nothing would ever bring it back. ``status`` and
    ``verify`` name the killed run, and starting the follower finishes it.
    """
    with table_scenario(spark, tmp_path) as (sc, t):
        sc.run_once("search")

        def daemon_applies_a_change() -> None:
            execute("postgres", f"UPDATE {t} SET v = 4242 WHERE id = 10")
            sc.run_once("search")  # the daemon's query, its checkpoint moved past the change

        with killed_at(monkeypatch, "final catch-up", daemon_applies_a_change):
            reindex(sc.config, sc.config.follower("search"), spark)
        assert recorded_step(sc, "search") == "published"
        config_path = tmp_path / "cdcsync.yaml"
        config_path.write_text(yaml.safe_dump(sc.raw))
        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path)]

        verify = subprocess.run([*command, "verify", "search"], capture_output=True, text=True, timeout=300)
        assert verify.returncode == 1 and "stale=1" in verify.stdout, verify.stdout
        assert "a reindex was killed after its switch" in verify.stderr and "cdcsync reindex search" in verify.stderr
        status = subprocess.run([*command, "status", "--json"], capture_output=True, text=True, timeout=120)
        assert any("reindex unfinished" in p for p in json.loads(status.stdout)["problems"]), status.stdout

        run = subprocess.run([*command, "run", "--once", "search"], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "caught up the reindex killed at step published" in run.stderr, run.stderr[-3000:]
        assert recorded_step(sc, "search") == "done"
        assert dirty(sc.config, spark, "search") == []
        verify = subprocess.run([*command, "verify", "search"], capture_output=True, text=True, timeout=300)
        assert verify.returncode == 0 and "killed" not in verify.stderr, (verify.stdout, verify.stderr)
