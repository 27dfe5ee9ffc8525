"""Holding one table alone (``sync.held``), on plain data: the follower sets aside the rows its sink fails for.

The real stores (an index closed, a Delta table made append-only) are in
tests/integration/test_held_tables.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdcsync.config import Config
from cdcsync.errors import FatalError, TableError
from cdcsync.sync import held
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sink import WriteResult
from tests.unit.test_shape import Sink, record

OTHER = "src.public.u"


class Refusing(Sink):
    """A sink that fails for target ``t`` alone."""

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        if any(r.target == "t" for r in rows):
            raise TableError("t", "index t is closed", "open it")
        return super().write(batch_id, rows)


def follower(sink: Sink) -> Follower:
    mappings = {
        "src.public.t": TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int"}),
        OTHER: TableMapping("public.u", "u", ("id",), types={"id": "int", "v": "int"}),
    }
    dead = DeadLetters({"bootstrap.servers": "127.0.0.1:1"}, "dlq", "held-test")
    return Follower("held-test", sink, mappings, dead, max_attempts=1)  # type: ignore[arg-type]


def test_the_rows_of_the_table_the_sink_fails_for_are_held_and_the_others_written() -> None:
    sink = Refusing()
    f = follower(sink)
    other = [r._replace(topic=OTHER) for r in (record(3, {"id": 3, "v": 3}), record(4, {"id": 4, "v": 4}))]
    counts = f.process(1, [record(1, {"id": 1, "v": 1}), *other, record(2, {"id": 2, "v": 2})])
    assert sorted(r.doc_id for r in sink.rows) == ["3", "4"]
    assert counts.held == 2 and counts.applied == 2 and counts.adds_up()
    assert counts.held_tables == {"src.public.t": ["index t is closed", "open it"]}


def config(tmp_path: Path) -> Config:
    return Config.model_validate({"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "state_dir": str(tmp_path)})


def test_a_held_table_is_left_out_then_replayed_from_where_it_stopped_and_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, f = config(tmp_path), follower(Sink())
    failed = BatchCounts(held_tables={"src.public.t": ["index t is closed", "open it"]})
    held.after_batch(cfg, f, failed, {"src.public.t": {0: 40}, OTHER: {0: 7}})
    assert json.loads(held.state_file(tmp_path, "held-test").read_text())["src.public.t"]["since"] == {"0": 40}
    [line] = held.lines(cfg, "held-test")
    assert "public.t" in line and "index t is closed" in line and "fix: open it" in line

    replayed: list[tuple[dict, dict]] = []

    def replay(start: dict, end: dict) -> BatchCounts:
        replayed.append((start, end))
        return failed if len(replayed) == 1 else BatchCounts()

    now = {"src.public.t": {0: 55}, OTHER: {0: 9}}
    assert held.before_batch(cfg, f, now, replay) == {"src.public.t"} and replayed == []  # not due yet
    monkeypatch.setattr(held, "RETRY_S", 0.0)
    held.after_batch(cfg, f, failed, now)  # held again by a later batch: it still stopped at 40
    assert held.before_batch(cfg, f, now, replay) == {"src.public.t"}  # tried, still failing
    assert held.holding(cfg, "held-test")["src.public.t"]["since"] == {"0": 40}
    assert held.before_batch(cfg, f, now, replay) == set()  # tried, applied: released, this batch takes it
    assert replayed == [({"src.public.t": {0: 40}}, {"src.public.t": {0: 55}})] * 2
    assert held.holding(cfg, "held-test") == {} and held.lines(cfg, "held-test") == []


class RefusingShapes(Sink):
    """A sink that refuses to learn a new column of target ``t`` (a name the store cannot hold)."""

    def learn(self, mapping: TableMapping) -> None:
        if mapping.target == "t" and "born" in mapping.types:
            raise FatalError("column 'born' clashes; give it another name: mappings.'public.t'.rename")
        super().learn(mapping)


def test_a_table_whose_new_shape_the_sink_refuses_is_held_and_the_others_written() -> None:
    def learn(topic: str) -> TableMapping:
        return TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int", "born": "date"})

    sink = RefusingShapes()
    f = follower(sink)
    f.learn = learn
    other = record(3, {"id": 3, "v": 3})._replace(topic=OTHER)
    grown = [record(1, {"id": 1, "v": 1, "born": "2020-01-02"}), record(2, {"id": 2, "v": 2})]
    counts = f.process(1, [*grown, other])
    assert [r.doc_id for r in sink.rows] == ["3"] and counts.held == 2 and counts.adds_up()
    [(reason, fix)] = counts.held_tables.values()
    assert "refused table public.t's new columns" in reason and "rename" in reason and "rename" in fix


class RefusingAtOpen(Sink):
    """A sink whose store no longer fits target ``t`` while ``broken``: it refuses to open it."""

    broken = True

    def open(self, mappings: list[TableMapping]) -> None:
        if self.broken and any(m.target == "t" for m in mappings):
            command = "cdcsync reindex s --table t --from source"
            raise TableError("t", f"index t: v is long, the mapping wants text; run `{command}`", f"run `{command}`")


def test_a_table_the_sink_refuses_at_start_is_held_from_the_first_batch_and_reopened_after_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, sink = config(tmp_path), RefusingAtOpen()
    f = follower(sink)
    held.open_tables(cfg, f.name, sink, f.mappings)  # the follower starts, without t
    [entry] = held.holding(cfg, f.name).values()
    assert entry["since"] == {} and entry["fix"] == "run `cdcsync reindex s --table t --from source`"
    assert "refused table public.t at the follower's start" in entry["reason"]

    replayed: list[tuple[dict, dict]] = []

    def replay(start: dict, end: dict) -> BatchCounts:
        replayed.append((start, end))
        return BatchCounts()

    assert held.before_batch(cfg, f, {"src.public.t": {0: 12}, OTHER: {0: 3}}, replay) == {"src.public.t"}
    assert held.holding(cfg, f.name)["src.public.t"]["since"] == {"0": 12}  # where its first change not applied is
    monkeypatch.setattr(held, "RETRY_S", 0.0)
    later = {"src.public.t": {0: 30}, OTHER: {0: 8}}
    assert held.before_batch(cfg, f, later, replay) == {"src.public.t"} and replayed == []  # still refused
    assert "still refuses it" in held.holding(cfg, f.name)["src.public.t"]["reason"]
    sink.broken = False  # the reindex ran
    assert held.before_batch(cfg, f, later, replay) == set()
    assert replayed == [({"src.public.t": {0: 12}}, {"src.public.t": {0: 30}})] and held.holding(cfg, f.name) == {}


def test_a_table_fixed_while_the_follower_was_stopped_is_tried_at_its_first_batch(
    tmp_path: Path,
) -> None:
    cfg, sink = config(tmp_path), RefusingAtOpen()
    f = follower(sink)
    held.open_tables(cfg, f.name, sink, f.mappings)
    sink.broken = False
    held.open_tables(cfg, f.name, sink, f.mappings)  # the next start, after the reindex
    assert held.before_batch(cfg, f, {"src.public.t": {0: 5}, OTHER: {0: 1}}, lambda s, e: BatchCounts()) == set()
    assert held.holding(cfg, f.name) == {}


def test_a_refusal_that_is_no_one_tables_stops_the_follower_s_start(tmp_path: Path) -> None:
    class RefusingAll(Sink):
        def open(self, mappings: list[TableMapping]) -> None:
            raise FatalError("index template refused")

    f = follower(RefusingAll())
    with pytest.raises(FatalError, match="template"):
        held.open_tables(config(tmp_path), f.name, f.sink, f.mappings)
    assert held.holding(config(tmp_path), f.name) == {}
