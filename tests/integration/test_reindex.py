"""`reindex`: a new store is built beside the live one and switched to while the follower keeps streaming.

The source keeps taking writes (a few hundred changes/s) and a reader keeps
querying throughout; every test ends with `verify` clean. A killed bootstrap
leaves nothing visible to readers, and a re-run succeeds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from elasticsearch import Elasticsearch

from cdcsync.snapshot import bootstrap, parallel
from cdcsync.snapshot import replay as engine
from cdcsync.snapshot.reindex import reindex
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.stream import checkpoint_dir, start_query
from tests.integration.followers import Scenario, numbered_table, scenario, writing
from tests.support import ENV, uid

ROWS = 1500


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-reindex-tests")
    yield session
    session.stop()


@dataclass
class Observed:
    """What a reader saw: every answer, every error, and when each probe started (monotonic seconds)."""

    answers: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)

    def widest_gap(self) -> float:
        """The longest time between two probes: how long the reader was blind at most."""
        return max((b - a for a, b in zip(self.starts, self.starts[1:], strict=False)), default=float("inf"))


@contextmanager
def table_scenario(spark: Any, tmp_path: Path) -> Iterator[tuple[Scenario, str]]:
    t = f"rx_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, ROWS)) as sc:
        yield sc, t


@contextmanager
def streaming(sc: Scenario, name: str, t: str) -> Iterator[None]:
    """The follower streams (processing-time trigger) while a writer changes the source."""
    sc.run_once(name)  # the live store exists and holds the table before the reindex begins
    cfg = sc.config.follower(name)
    query = start_query(sc.spark, sc.config, cfg, sc.followers[name])
    try:
        with writing(t, ROWS):
            time.sleep(3)  # some batches stream before the reindex starts
            yield
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    sc.run_once(name)  # apply the rest, then the store must match the source
    sc.assert_converged(name)


@contextmanager
def reading(probe: Callable[[], int]) -> Iterator[Observed]:
    """Call ``probe`` in a loop on a thread throughout the block; record answers and errors.

    The probes span the whole block, however short it is: one has ended before
    the block starts, and one starts after it ends. So a test asserts on the
    gaps between probes, not on how many there were (a faster reindex makes fewer).
    """
    seen, stop, first = Observed(), threading.Event(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            seen.starts.append(time.monotonic())
            try:
                seen.answers.append(probe())
            except Exception as err:  # the assertion is that this never happens
                seen.errors.append(repr(err)[:300])
            first.set()
            time.sleep(0.01)

    reader = threading.Thread(target=loop)
    reader.start()
    try:
        assert first.wait(30), "the reader's first probe did not return within 30 s"
        yield seen
    finally:
        ended = time.monotonic()
        deadline = ended + 30
        while reader.is_alive() and (not seen.starts or seen.starts[-1] <= ended) and time.monotonic() < deadline:
            time.sleep(0.01)  # one more probe that starts after the block
        stop.set()
        reader.join()


def in_processes(monkeypatch: pytest.MonkeyPatch, processes: int) -> None:
    """Every replay of the reindex (the fill, and the catch-up into the live store after the publish) in
    ``processes`` processes (``snapshot.parallel``), in slices of 500 offsets, however short it is."""
    if processes > 1:
        monkeypatch.setattr(parallel, "PROCESSES", processes)
        monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
        monkeypatch.setattr(engine, "SLICE_RECORDS", 500)


@pytest.mark.parametrize("processes", [1, 2])
def test_elasticsearch_reindex_swaps_the_alias_without_readers_seeing_a_gap(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: int
) -> None:
    in_processes(monkeypatch, processes)
    with table_scenario(spark, tmp_path) as (sc, t):
        cfg = sc.config.follower("search")
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        alias = f"{cfg.prefix}{t}"
        with streaming(sc, "search", t):
            assert list(es.indices.get_alias(name=alias)) == [f"{alias}-000001"]
            es.indices.refresh(index=alias)
            # The rows that existed before are updated, never deleted (``writing``): each stays readable
            # throughout. Not the whole count: the writer's own inserts come and go, and one inserted
            # between E1b and the switch is absent until step 5 replays it (docs/reindex.md).
            original = {"range": {"id": {"lte": ROWS}}}

            def present() -> int:
                found = int(es.count(index=alias, query=original)["count"])
                if found != ROWS:
                    raise AssertionError(f"only {found} of the {ROWS} rows readable")
                return found

            assert present() == ROWS
            with reading(present) as seen:
                summary = reindex(sc.config, cfg, spark)
            assert not seen.errors, seen.errors[:3]  # never a missing index, never a missing row
            assert seen.widest_gap() < 3, f"the reader was blind for {seen.widest_gap():.1f} s"
            assert summary.fill.records >= ROWS and summary.fill.dead_lettered == 0
            assert list(es.indices.get_alias(name=alias)) == [f"{alias}-000002"]
            assert not es.indices.exists(index=f"{alias}-000001")


def changes_after_publish(monkeypatch: pytest.MonkeyPatch, sc: Scenario) -> None:
    """The reindex's publish returns only once the log holds a change made after it: its catch-up has one to apply.

    The writer commits a few hundred changes/s, but the capture after a
    publish of a small table can come within tens of milliseconds of the one
    before it, with no change landed in between.
    """
    from cdcsync.snapshot import reindex as module

    publish = module.publish

    def then_wait(sink: Any) -> None:
        publish(sink)
        topics = sorted(sc.followers["cache"].mappings)
        published = sum(high for _, high in engine.capture(sc.config, topics).values())
        deadline = time.monotonic() + 30
        while sum(high for _, high in engine.capture(sc.config, topics).values()) <= published:
            assert time.monotonic() < deadline, "no change reached the log within 30 s of the publish"
            time.sleep(0.05)

    monkeypatch.setattr(module, "publish", then_wait)


@pytest.mark.parametrize("processes", [1, 2])
def test_redis_reindex_keeps_every_key_readable_and_leaves_no_staged_keys(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: int
) -> None:
    in_processes(monkeypatch, processes)
    with table_scenario(spark, tmp_path) as (sc, t):
        cfg = sc.config.follower("cache")
        changes_after_publish(monkeypatch, sc)
        client = redis.Redis(port=int(ENV["REDIS_PORT"]), decode_responses=True)
        with streaming(sc, "cache", t):
            keys = [f"{cfg.prefix}:{t}:{i}" for i in range(1, ROWS + 1)]
            assert client.exists(*keys) == ROWS

            def present() -> int:
                found = client.exists(*keys)
                if found != ROWS:
                    raise AssertionError(f"only {found} of {ROWS} keys readable")
                return found

            with reading(present) as seen:
                summary = reindex(sc.config, cfg, spark, table=t)
            assert not seen.errors, seen.errors[:3]
            assert seen.widest_gap() < 3, f"the reader was blind for {seen.widest_gap():.1f} s"
            assert summary.targets == [t] and summary.catch_up.records > 0
            assert not list(client.scan_iter(f"{cfg.prefix}~*"))  # the staged generation is gone


def test_delta_reindex_publishes_one_new_table_version(spark: Any, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    with table_scenario(spark, tmp_path) as (sc, t):
        cfg = sc.config.follower("warehouse")
        path = f"{cfg.path}/{t}"
        with streaming(sc, "warehouse", t):
            before = DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
            reindex(sc.config, cfg, spark)
            operations = DeltaTable.forPath(spark, path).history().where(f"version > {before}").collect()
            # The switch is one overwrite commit among the follower's merges.
            assert [r["operationParameters"]["mode"] for r in operations if r["operation"] == "WRITE"] == ["Overwrite"]
            assert not Path(f"{path}__staging").exists()


def test_bootstrap_killed_half_way_shows_readers_nothing_and_a_rerun_succeeds(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "BATCH_ROWS", 500)  # several chunks, so a kill can land between two

    def killed(done: int, total: int, elapsed: float) -> None:
        raise KeyboardInterrupt("killed half-way")

    def run(sc: Scenario, cfg: Any, progress: engine.Progress | None = None) -> engine.Summary:
        follower = build_follower(sc.config, cfg, spark, open_sink=False)  # as the bootstrap command does
        try:
            return bootstrap.bootstrap_from_topics(
                sc.config, cfg, follower, checkpoint_dir(sc.config, cfg), base_dir(sc.config), progress
            )
        finally:
            follower.sink.close()

    with table_scenario(spark, tmp_path) as (sc, t):
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        client = redis.Redis(port=int(ENV["REDIS_PORT"]), decode_responses=True)
        sc.caught_up()
        for cfg in sc.config.followers:
            with pytest.raises(KeyboardInterrupt):
                run(sc, cfg, killed)
        # Half of a store was written, and readers see none of it.
        alias = f"{sc.config.follower('search').prefix}{t}"
        assert es.indices.exists(index=f"{alias}-000001") and not es.indices.exists_alias(name=alias)
        prefix = sc.config.follower("cache").prefix
        assert list(client.scan_iter(f"{prefix}~*")) and not list(client.scan_iter(f"{prefix}:*"))
        warehouse = Path(str(sc.config.follower("warehouse").path))
        assert (warehouse / f"{t}__staging").exists() and not (warehouse / t).exists()
        assert not (base_dir(sc.config) / "bootstrap").exists()  # no start offsets recorded
        for cfg in sc.config.followers:
            summary = run(sc, cfg)
            assert summary.records > ROWS and summary.dead_lettered == 0
        assert list(es.indices.get_alias(name=alias)) == [f"{alias}-000002"]  # the killed stage was dropped
        assert not list(client.scan_iter(f"{prefix}~*"))
        assert not (warehouse / f"{t}__staging").exists()
        sc.assert_converged()
