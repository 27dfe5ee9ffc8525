"""Harness for follower tests: captured tables, three followers (Elasticsearch, Redis, Delta), verify.

One Spark session serves a whole test module. Each scenario gets unique
tables, connector, topics, index prefix, Redis prefix, Delta path, checkpoints
and dead-letter topic, all removed afterwards.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import redis
from elasticsearch import Elasticsearch

from cdcsync.config import Config
from cdcsync.connectors.apply import apply
from cdcsync.state import base_dir
from cdcsync.sync.batch_reader import batch_span
from cdcsync.sync.build import build_follower
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.stream import checkpoint_dir, start_file, start_query
from cdcsync.sync.verify.compare import TableReport, verify_follower
from tests.support import ENV, drop_capture, execute, in_background, read_topic, source_dict, uid, wait_streaming


def follower_dicts(tag: str, tmp: Path) -> list[dict[str, Any]]:
    return [
        {
            "name": "search",
            "kind": "elasticsearch",
            "url": f"http://127.0.0.1:{ENV['ES_PORT']}",
            "prefix": f"{tag}-",
            "dead_letter_topic": f"dlq.{tag}.search",
            "checkpoint_dir": str(tmp / "ckpt-search"),
        },
        {
            "name": "cache",
            "kind": "redis",
            "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0",
            "prefix": tag,
            "dead_letter_topic": f"dlq.{tag}.cache",
            "checkpoint_dir": str(tmp / "ckpt-cache"),
        },
        {
            "name": "warehouse",
            "kind": "delta",
            "path": str(tmp / "warehouse"),
            "soft_delete": True,
            "dead_letter_topic": f"dlq.{tag}.warehouse",
            "checkpoint_dir": str(tmp / "ckpt-warehouse"),
        },
    ]


class Scenario:
    def __init__(self, config: Config, spark: Any, tag: str) -> None:
        self.config, self.spark, self.tag = config, spark, tag
        self.followers: dict[str, Any] = {}
        self.ticks = 0
        self.raw: dict[str, Any] = {}  # the config as written in YAML, secrets included

    def caught_up(self) -> None:
        """Commit a tick in each source and wait until capture emitted it: all committed before is in Kafka."""
        self.ticks += 1
        for source in self.config.sources:
            tick = next(t for t in source.tables if t.table.startswith("tick_"))
            execute(source.kind, f"INSERT INTO {tick.table} VALUES ({self.ticks})")
            read_topic(source.topic(tick), lambda rs: any(r.key == {"id": self.ticks} for r in rs), timeout=180)
        time.sleep(1)  # records of other topics sent just before the tick may still be in flight

    def run_once(self, *names: str) -> None:
        """Apply everything committed up to now, for each follower (as `cdcsync run --once`)."""
        self.caught_up()
        for cfg in self.config.followers:
            if names and cfg.name not in names:
                continue
            follower = self.followers.get(cfg.name) or build_follower(self.config, cfg, self.spark)
            self.followers[cfg.name] = follower
            query = start_query(self.spark, self.config, cfg, follower, once=True)
            query.awaitTermination(600)
            assert query.exception() is None, query.exception()

    def bootstrap_from_source(self) -> None:
        """Fill every follower's stores by ``bootstrap --from source`` (a source with snapshot_mode no_data)."""
        from cdcsync.snapshot.source import bootstrap_from_source

        for cfg in self.config.followers:
            follower = build_follower(self.config, cfg, self.spark, open_sink=False)
            summary = bootstrap_from_source(
                self.config, cfg, follower, self.spark, checkpoint_dir(self.config, cfg), base_dir(self.config)
            )
            assert summary.dead_lettered == 0, summary
            assert json.loads(start_file(base_dir(self.config), cfg.name).read_text())["from"] == "source"
            self.followers[cfg.name] = follower

    def verify(self, *names: str) -> list[TableReport]:
        reports = []
        for cfg in self.config.followers:
            if names and cfg.name not in names:
                continue
            sink = build_sink(self.config, cfg, self.spark)
            reports.extend(verify_follower(self.config, cfg, sink))
        return reports

    def assert_converged(self, *names: str) -> None:
        bad = [r.as_dict() for r in self.verify(*names) if not r.clean]
        assert not bad, bad

    def held(self, follower: str, target: str) -> dict[str, tuple[int, dict[str, Any]]]:
        return self.followers[follower].sink.held(target)

    def docs(self, follower: str, target: str) -> dict[str, dict[str, Any]]:
        """What a follower's store holds for ``target``: id -> document, read through the store's own client."""
        return {ident: doc for ident, (_version, doc) in self.held(follower, target).items()}


def assert_first_batch_from(config: Config, cfg: Any, follower: Any, query: Any, recorded: dict[str, Any]) -> None:
    """A new follower's stream began where its bootstrap stopped: ``recorded`` (the start file's offsets).

    The first batch's start is in the checkpoint (``sync.batch_reader.batch_span``). A follower whose Spark
    tasks read the batch also has Spark's count of the rows read, which says the same: from "earliest" it
    would count every record. The warehouse reads its batch itself: Spark counts none.
    """
    start, _end = batch_span(checkpoint_dir(config, cfg), 0)
    assert {t: {str(p): o for p, o in start[t].items()} for t in recorded} == recorded, (cfg.name, start)
    first = query.recentProgress[0]["sources"][0]  # a new query reports no startOffset
    if follower.sink.order_free:
        end = json.loads(first["endOffset"])
        expected = sum(end[tp][p] - offset for tp, parts in recorded.items() for p, offset in parts.items())
        assert first["numInputRows"] == expected, (cfg.name, first, recorded)


def numbered_table(t: str, rows: int, kind: str = "postgres") -> dict[str, list[str]]:
    """DDL for ``scenario``: a table ``t (id, v)`` holding ids 1..rows, v = id."""
    series = (
        f"SELECT g, g FROM generate_series(1, {rows}) g"
        if kind == "postgres"
        else f"SELECT seq, seq FROM seq_1_to_{rows}"
    )
    return {kind: [f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT NOT NULL)", f"INSERT INTO {t} {series}"]}


@contextmanager
def writing(t: str, rows: int, kind: str = "postgres") -> Iterator[None]:
    """A thread changes ``numbered_table`` t until the block ends, a few hundred changes/s.

    Per transaction: insert a new id (from 100001), update one of ids
    1..rows, delete its own insert of 20 transactions ago. Rows that existed
    before are updated, never deleted: a reader may count on each of them.
    """
    ids = itertools.count(100_001)

    def step() -> None:
        i = next(ids)
        execute(
            kind,
            f"INSERT INTO {t} VALUES ({i}, {i})",
            f"UPDATE {t} SET v = v + 1 WHERE id = {i % rows + 1}",
            f"DELETE FROM {t} WHERE id = {i - 20} AND id > 100000",
        )

    with in_background(step, pause_s=0.003):
        yield


def drop_stores(config: Config, tag: str) -> None:
    """Remove what the followers of a scenario wrote: dead-letter topics, indexes, Redis keys."""
    from cdcsync.connectors.topics import delete_topics

    delete_topics(config, [f.dlq_topic for f in config.followers])
    es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
    es.indices.delete(index=f"{tag}-*", ignore_unavailable=True, allow_no_indices=True)
    r = redis.Redis(port=int(ENV["REDIS_PORT"]))
    for pattern in (f"{tag}:*", f"{tag}~*"):  # live keys, and staged generations (sync/sinks/redis.py)
        for key in r.scan_iter(pattern, count=1000):
            r.delete(key)


def tear_down(config: Config, tag: str, daemon: subprocess.Popen | None, tables: dict[str, str]) -> None:
    """After a test that ran ``cdcsync run``: its process group if still there, capture, stores, ``{table: kind}``."""
    if daemon is not None:
        with suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)
    drop_capture(config)
    drop_stores(config, tag)
    for name, kind in tables.items():
        execute(kind, f"DROP TABLE IF EXISTS {name}")


@contextmanager
def scenario(
    spark: Any,
    tmp: Path,
    tables: dict[str, list[Any]],
    ddl: dict[str, list[str]],
    mappings: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
) -> Iterator[Scenario]:
    """``tables``/``ddl`` by kind ("postgres", "mariadb"); tables are namespace-qualified.

    ``source_options`` go into every source's config (e.g. ``snapshot_mode``).
    """
    tag = f"t{uid()}"
    tables = {
        kind: [*names, f"{'public' if kind == 'postgres' else 'inventory'}.tick_{tag}_{kind[:2]}"]
        for kind, names in tables.items()
    }
    for kind, statements in ddl.items():
        execute(kind, *statements, f"CREATE TABLE tick_{tag}_{kind[:2]} (id INT PRIMARY KEY)")
    sources = [
        source_dict(kind, f"{tag}_{'pg' if kind == 'postgres' else 'ma'}", names, **(source_options or {}))
        for kind, names in tables.items()
    ]
    raw = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": sources,
        "followers": [{**f, "mappings": mappings or {}} for f in follower_dicts(tag, tmp)],
        "state_dir": str(tmp),
    }
    config = Config.model_validate(raw)
    try:
        apply(config)
        wait_streaming(config)
        sc = Scenario(config, spark, tag)
        sc.raw = raw
        yield sc
    finally:
        drop_capture(config)
        drop_stores(config, tag)
        for kind, names in tables.items():
            for name in names:
                if isinstance(name, str):  # a {namespace, table} is the test's own to drop
                    execute(kind, f"DROP TABLE IF EXISTS {name.split('.')[-1]}")
