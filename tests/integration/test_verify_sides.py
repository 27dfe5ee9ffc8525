"""verify's source side read in a process of its own finds exactly what the same side read on a thread finds.

Real Postgres, Elasticsearch and Redis; no capture: the stores are filled by
the sinks' own writes, then differences are planted in them the way a lost
or wrong write would leave them. The table is partitioned and its name is
quoted mixed case, so the size that chooses the process is its partitions'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.config import Config
from cdcsync.events import Change
from cdcsync.sync.catalog import mappings_for, source_rows, table_bytes
from cdcsync.sync.mapping import Row, canonical_doc, doc_id
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.verify import compare as verify
from cdcsync.sync.verify import recheck as verify_recheck
from cdcsync.sync.verify.compare import verify_follower
from tests.support import ENV, execute, uid

ROWS = 3000


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[tuple[Config, str]]:
    """A partitioned Postgres table of ``ROWS`` rows, both stores holding them; the config and the table."""
    from bench.common import empty_stores, one_table_doc, three_followers

    tag = f"vs{uid()}"
    table = f"Verify Sides {tag}"
    quoted = f'"{table}"'
    execute(
        "postgres",
        f"CREATE TABLE {quoted} (id bigint PRIMARY KEY, name text NOT NULL, at timestamptz) PARTITION BY RANGE (id)",
        f'CREATE TABLE "{table} low" PARTITION OF {quoted} FOR VALUES FROM (MINVALUE) TO (1500)',
        f'CREATE TABLE "{table} high" PARTITION OF {quoted} FOR VALUES FROM (1500) TO (MAXVALUE)',
        f"INSERT INTO {quoted} SELECT g, md5(g::text), CASE WHEN g % 100 = 0 THEN 'infinity' ELSE"
        f" timestamptz '2026-01-01' + g * interval '1 minute' END FROM generate_series(1, {ROWS}) g",
    )
    doc = one_table_doc(tag, table, three_followers(tag, tmp_path, ["search", "cache"]), tmp_path)
    doc["sources"][0]["tables"] = [{"namespace": "public", "table": table}]  # a name of spaces and capitals
    config = Config.model_validate(doc)
    try:
        for follower in config.followers:
            _fill(config, follower)
        yield config, table
    finally:
        execute("postgres", f"DROP TABLE IF EXISTS {quoted}")
        empty_stores(tag)


def _fill(config: Config, follower: Any) -> None:
    def planted(source: Any, mapping: Any) -> list[Row]:
        rows = []
        for row in source_rows(source, source.tables[0]):
            if row["id"] in (7, 1501):
                continue  # missing: a write the store never got
            doc = canonical_doc(row, mapping)
            if row["id"] in (8, 2999):
                doc = {**doc, "name": "not what the source holds"}  # stale
            change = Change(source.name, mapping.table, "r", {"id": row["id"]}, doc, None, 1, "test", 0, 0)
            rows.append(Row(change, mapping.target, doc_id(row, mapping), doc))
        extra = {"id": 99_999, "name": "gone from the source", "at": None}
        rows.append(Row(Change(source.name, mapping.table, "r", {"id": 99_999}, extra, None, 1, "test", 0, 0),
                        mapping.target, "99999", extra))  # fmt: skip
        return rows

    _write_rows(config, follower, planted)


def _write_rows(config: Config, follower: Any, rows_for: Callable[[Any, Any], list[Row]]) -> None:
    """Write ``rows_for(source, mapping)`` to the follower's store with its sink, and make them visible."""
    mapping = next(iter(mappings_for(config, follower).values()))
    sink = build_sink(config, follower, None)
    sink.open([mapping])
    rows = rows_for(config.sources[0], mapping)
    assert sink.write(0, rows).applied == len(rows)
    sink.make_visible([mapping.target])
    sink.close()


def test_the_source_side_in_a_process_finds_what_it_finds_on_a_thread(
    filled: tuple[Config, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _table = filled
    source = config.sources[0]
    assert table_bytes(source, source.tables[0]) > 0  # its partitions' bytes: the parent holds none
    found = {}
    for way, threshold in (("process", 0), ("thread", 2**62)):
        monkeypatch.setattr(verify, "PROCESS_BYTES", threshold)
        lines: list[str] = []
        for follower in config.followers:
            sink = build_sink(config, follower, None)
            (report,) = verify_follower(config, follower, sink, pauses=(0.0,), progress=lines.append)
            sink.close()
            found[way, follower.name] = (report.missing, report.extra, report.stale, report.source_rows)
        # the process prints its own progress (to stderr): only the thread's reach the caller's callable
        assert any(": source:" in line for line in lines) == (way == "thread"), lines
    for follower in config.followers:
        want = (["1501", "7"], ["99999"], ["2999", "8"], ROWS)
        assert found["process", follower.name] == want == found["thread", follower.name], follower.name


def test_a_source_side_that_fails_in_its_process_fails_the_verify_with_the_error_it_met(
    filled: tuple[Config, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _table = filled
    monkeypatch.setattr(verify, "PROCESS_BYTES", 0)
    follower = config.followers[0]
    sink = build_sink(config, follower, None)
    moved = config.model_copy(
        update={"sources": [config.sources[0].model_copy(update={"port": int(ENV["PG_PORT"]) + 7})]}
    )  # the process connects to a port nothing listens on; the caller's catalog reads came first
    monkeypatch.setattr(verify, "table_bytes", lambda *_: 1)
    monkeypatch.setattr(verify, "mappings_for", lambda *_: mappings_for(config, follower))
    with pytest.raises(Exception, match="connect|refused") as failed:
        verify_follower(moved, follower, sink, pauses=(0.0,))
    assert "psycopg" in type(failed.value).__module__, repr(failed.value)
    sink.close()


def test_every_row_that_moved_during_the_pass_is_looked_at_again_not_only_those_listed(
    filled: tuple[Config, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More rows differ at the end of the pass than a report lists; each is looked at again, by id, in the real
    source and store, and only the planted divergence is left."""
    config, table = filled
    moved = range(100, 140)  # 40 rows, ten times what a report lists here
    for module in (verify, verify_recheck):  # what a report lists, and how many ids a look is asked about
        monkeypatch.setattr(module, "LISTED", 4)
    recheck = verify.recheck
    for n, follower in enumerate(config.followers):
        name = f"moved {n}"
        _write(config, follower, moved, name, version=2)  # the store has a change the pass's source read lacked

        def after_the_change_reached_the_source(*args: Any, name: str = name, **kwargs: Any) -> None:
            # what a writer committed during the pass and the follower applied before the re-check
            execute("postgres", f"UPDATE \"{table}\" SET name = '{name}' WHERE id BETWEEN 100 AND 139")
            recheck(*args, **kwargs)

        monkeypatch.setattr(verify, "recheck", after_the_change_reached_the_source)
        sink = build_sink(config, follower, None)
        (report,) = verify_follower(config, follower, sink, pauses=(0.0, 0.5))
        sink.close()
        assert (report.missing, report.extra, report.stale) == (["1501", "7"], ["99999"], ["2999", "8"]), report
        assert (report.missing_count, report.extra_count, report.stale_count) == (2, 1, 2), follower.name


def _write(config: Config, follower: Any, ids: range, name: str, version: int) -> None:
    def renamed(source: Any, mapping: Any) -> list[Row]:
        rows = []
        for row in source_rows(source, source.tables[0]):
            if row["id"] in ids:
                doc = {**canonical_doc(row, mapping), "name": name}
                change = Change(source.name, mapping.table, "u", {"id": row["id"]}, doc, None, version, "test", 0, 0)
                rows.append(Row(change, mapping.target, doc_id(row, mapping), doc))
        assert len(rows) == len(ids)
        return rows

    _write_rows(config, follower, renamed)
