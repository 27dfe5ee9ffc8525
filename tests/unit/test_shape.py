"""A follower meeting columns its mapping lacks (docs/schema-changes.md), on plain data.

The integration test (tests/integration/test_schema_changes.py) proves the
sinks converge; this one pins the rules of ``Follower._shape``: where the
catalog can be read the table is learned once and the sink told first;
where it cannot (an executor) a new column stops the batch with
``ShapeChanged`` for the driver, and a lacking one is written as it is and
told to the driver after the batch; a column the catalog does not know either is not asked for again; a
column the catalog lost, that changes lack, is forgotten by the sink.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from cdcsync.events import Record
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.shape import ShapeChanged, shape_changed, shapes_changed
from cdcsync.sync.sink import WriteResult

TOPIC = "src.public.t"


class Sink:
    name, chunk_rows, writers = "memory", None, 1

    def __init__(self) -> None:
        self.learned: list[TableMapping] = []
        self.rows: list[Row] = []
        self.forgotten: list[tuple[str, list[str]]] = []
        self.shown: list[list[str]] = []

    def learn(self, mapping: TableMapping) -> None:
        self.learned.append(mapping)

    def forget(self, target: str, fields: list[str]) -> None:
        self.forgotten.append((target, list(fields)))

    def make_visible(self, targets: list[str]) -> None:
        self.shown.append(list(targets))

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        assert all(set(r.doc or {}) <= set(self.learned[-1].types) | {"gone"} for r in rows if self.learned)
        self.rows.extend(rows)
        return WriteResult(applied=len(rows))


def record(offset: int, after: dict[str, Any]) -> Record:
    value = {
        "op": "u",
        "after": after,
        "source": {"connector": "postgresql", "name": "src", "schema": "public", "table": "t",
                   "sequence": json.dumps([str(1000 + offset * 100), str(1050 + offset * 100)])},
        "transaction": {"total_order": 1},
    }  # fmt: skip
    return Record(TOPIC, 0, offset, json.dumps({"id": after["id"]}).encode(), json.dumps(value).encode())


def follower(learn: Any, types: dict[str, str] | None = None) -> tuple[Follower, Sink]:
    sink = Sink()
    mapping = TableMapping("public.t", "t", ("id",), types=types or {"id": "int", "v": "int"})
    dead = DeadLetters({"bootstrap.servers": "127.0.0.1:1"}, "dlq", "shape-test")
    return Follower("shape-test", sink, {TOPIC: mapping}, dead, learn=learn), sink  # type: ignore[arg-type]


def test_a_new_column_is_learned_once_and_the_sink_told_before_its_rows() -> None:
    asked: list[str] = []

    def learn(topic: str) -> TableMapping:
        asked.append(topic)
        return TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int", "born": "date"})

    f, sink = follower(learn)
    counts = f.process(1, [record(1, {"id": 1, "v": 1}), record(2, {"id": 2, "v": 2, "born": "2020-01-02"}),
                           record(3, {"id": 3, "v": 3, "born": "2020-01-03"})])  # fmt: skip
    assert asked == [TOPIC] and counts.applied == 3
    assert [m.types.get("born") for m in sink.learned] == ["date"]
    born = [r.doc["born"] for r in sink.rows if r.doc and "born" in r.doc]
    assert [str(b) for b in born] == ["2020-01-02", "2020-01-03"]  # converted by the learned type, not raw text


def test_a_column_the_catalog_does_not_know_is_asked_for_once() -> None:
    asked: list[str] = []

    def learn(topic: str) -> TableMapping:
        asked.append(topic)
        return TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int"})

    f, sink = follower(learn)
    f.process(1, [record(n, {"id": n, "v": n, "gone": "x"}) for n in range(1, 6)])
    assert asked == [TOPIC] and len(sink.rows) == 5 and all(r.doc and r.doc["gone"] == "x" for r in sink.rows)


def test_on_an_executor_the_batch_stops_for_the_driver() -> None:
    f, sink = follower(shape_changed)
    with pytest.raises(ShapeChanged) as raised:
        f.process(1, [record(1, {"id": 1, "v": 1, "born": "2020-01-02"})])
    assert shapes_changed(f"Py4JJavaError: ... {raised.value} ...") == {TOPIC: ({"born"}, set())}
    assert not sink.rows


def test_a_follower_with_no_catalog_keeps_new_columns_untyped() -> None:
    f, sink = follower(None)
    f.process(1, [record(1, {"id": 1, "v": 1, "born": "2020-01-02"})])
    assert [r.doc for r in sink.rows] == [{"id": 1, "v": 1, "born": "2020-01-02"}] and not sink.learned


def catalog(*shapes: dict[str, str]) -> tuple[Any, list[str]]:
    """A ``learn`` answering each shape in turn (the last one from then on), and the topics it was asked for."""
    asked: list[str] = []

    def learn(topic: str) -> TableMapping:
        asked.append(topic)
        return TableMapping("public.t", "t", ("id",), types=shapes[min(len(asked), len(shapes)) - 1])

    return learn, asked


def test_a_dropped_column_is_forgotten_once_and_older_changes_no_longer_write_it() -> None:
    learn, asked = catalog({"id": "int", "v": "int"})  # the catalog after DROP COLUMN gone
    f, sink = follower(learn, {"id": "int", "v": "int", "gone": "text"})
    f.process(1, [record(1, {"id": 1, "v": 1, "gone": "a"}), record(2, {"id": 2, "v": 2}),
                  record(3, {"id": 3, "v": 3}), record(4, {"id": 4, "v": 4, "gone": "late"})])  # fmt: skip
    assert asked == [TOPIC] and sink.forgotten == [("t", ["gone"])]
    assert [r.doc for r in sink.rows] == [{"id": 1, "v": 1, "gone": "a"}, {"id": 2, "v": 2}, {"id": 3, "v": 3},
                                          {"id": 4, "v": 4}]  # fmt: skip
    assert f.mappings[TOPIC].dropped == {"gone"}


def test_a_column_changes_lack_that_the_catalog_still_lists_is_asked_for_once_and_forgets_nothing() -> None:
    learn, asked = catalog({"id": "int", "v": "int", "born": "date"})  # changes written before ADD COLUMN born
    f, sink = follower(learn, {"id": "int", "v": "int", "born": "date"})
    f.process(1, [record(n, {"id": n, "v": n}) for n in range(1, 6)])
    assert asked == [TOPIC] and not sink.forgotten and len(sink.rows) == 5
    assert f.mappings[TOPIC].may_lack == {"born"}


def test_a_renamed_column_is_a_column_lost_and_one_learned() -> None:
    learn, asked = catalog({"id": "int", "amount": "decimal"})  # RENAME COLUMN v TO amount
    f, sink = follower(learn, {"id": "int", "v": "int"})
    f.process(1, [record(1, {"id": 1, "amount": "12.50"})])
    assert asked == [TOPIC] and sink.forgotten == [("t", ["v"])]
    assert [r.doc for r in sink.rows] == [{"id": 1, "amount": Decimal("12.50")}]


def test_on_an_executor_a_change_lacking_a_column_is_written_and_the_driver_told_after_the_batch() -> None:
    """A change older than the catalog (or one after a DROP) never stops a batch: it is what it is."""
    f, sink = follower(shape_changed, {"id": "int", "v": "int", "gone": "text"})
    counts = f.process(1, [record(1, {"id": 1, "v": 1}), record(2, {"id": 2, "v": 2})])
    assert counts.applied == 2 and counts.lacking == {TOPIC: ["gone"]}
    assert [r.doc for r in sink.rows] == [{"id": 1, "v": 1}, {"id": 2, "v": 2}]
    # The driver learns with that after the batch: a column the catalog lost is forgotten in every row.
    learn, _ = catalog({"id": "int", "v": "int"})
    driver, driver_sink = follower(learn, {"id": "int", "v": "int", "gone": "text"})
    driver.relearn(TOPIC, frozenset(), frozenset({"gone"}))
    assert driver_sink.forgotten == [("t", ["gone"])]
    worker, worker_sink = follower(shape_changed)
    worker.mappings = dict(driver.mappings)
    counts = worker.process(2, [record(3, {"id": 1, "v": 1}), record(4, {"id": 2, "v": 2, "gone": "x"})])
    assert counts.applied == 2 and counts.lacking == {}
    assert [r.doc for r in worker_sink.rows] == [{"id": 1, "v": 1}, {"id": 2, "v": 2}]  # dropped: written no more


def test_lacking_columns_of_executors_add_up_on_the_driver() -> None:
    from cdcsync.sync.batch_counts import BatchCounts

    one, two = BatchCounts(lacking={TOPIC: ["a"]}), BatchCounts(lacking={TOPIC: ["b"], "other": ["c"]})
    merged = BatchCounts.from_json(one.merge(two).to_json())
    assert merged.lacking == {TOPIC: ["a", "b"], "other": ["c"]}


def test_generated_columns_are_left_out_of_changes_and_of_source_rows() -> None:
    from cdcsync.events import parse_record
    from cdcsync.sync.mapping import canonical_doc, map_row

    mapping = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int"}, unlogged=frozenset({"twice"}))
    f, sink = follower(shape_changed)
    f.mappings = {TOPIC: mapping}
    counts = f.process(1, [record(1, {"id": 1, "v": 1, "twice": 2}), record(2, {"id": 2, "v": 2})])
    assert counts.applied == 2 and counts.lacking == {}  # neither unknown (a MariaDB event) nor lacking (Postgres)
    assert [r.doc for r in sink.rows] == [{"id": 1, "v": 1}, {"id": 2, "v": 2}]
    raw = record(9, {"id": 9, "v": 9, "twice": 18})
    change = parse_record(TOPIC, 0, 9, raw.key, raw.value)
    assert change is not None and map_row(change, mapping).doc == {"id": 9, "v": 9}
    assert canonical_doc({"id": 9, "v": 9, "twice": 18}, mapping) == {"id": 9, "v": 9}  # what verify compares


def test_which_shape_changes_need_a_rebuild_from_the_source() -> None:
    from cdcsync.sync.shape import backfilled, reindex_reason

    old = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int"})

    def new(**types: str) -> TableMapping:
        filled = frozenset(c for c in types if c.startswith("d_"))  # columns with a DEFAULT, in this test
        return TableMapping("public.t", "t", ("id",), types={"id": "int", **types}, filled=filled)

    assert reindex_reason(old, new(v="int", b="int"), frozenset()) is None  # ADD COLUMN: rows get it as they change
    assert reindex_reason(old, new(), frozenset({"v"})) is None  # DROP COLUMN: forgotten in every row
    assert "RENAME" in (reindex_reason(old, new(w="int"), frozenset({"v"})) or "")
    assert "DEFAULT" in (reindex_reason(old, new(v="int", d_flag="int"), frozenset()) or "")
    # ... which a backfill through the log serves (sync.backfill), unless columns went too (a RENAME)
    assert backfilled(old, new(v="int", d_flag="int", b="int"), frozenset()) == {"d_flag"}
    assert backfilled(old, new(d_flag="int"), frozenset({"v"})) == frozenset()


def test_a_rebuild_is_recorded_shown_and_cleared(tmp_path: Any) -> None:
    from prometheus_client import REGISTRY

    from cdcsync.config import Config
    from cdcsync.sync import reindex_needed

    config = Config.model_validate({"state_dir": str(tmp_path)})
    reindex_needed.mark(config, "search", "public.t", "columns ['v'] went and ['w'] came")
    reindex_needed.mark(config, "search", "public.u", "columns ['d'] were added with a value")
    gauges = ("cdcsync_reindex_needed", "cdcsync_rebuild_needed")  # the metric, and its old name for alerts using it
    assert [REGISTRY.get_sample_value(g, {"follower": "search", "table": "public.t"}) for g in gauges] == [1, 1]
    assert reindex_needed.lines(config, "search")[0] == (
        "follower search: table public.t needs a reindex from the source (columns ['v'] went and ['w'] came): "
        "run `cdcsync reindex search --table public.t --from source`"
    )
    reindex_needed.clear(config, "search", ["public.t"])
    assert [REGISTRY.get_sample_value(g, {"follower": "search", "table": "public.t"}) for g in gauges] == [0, 0]
    assert list(reindex_needed.needed(config, "search")) == ["public.u"] and not reindex_needed.needed(config, "cache")
    reindex_needed.clear(config, "search")
    assert reindex_needed.lines(config, "search") == []


def test_a_kind_change_is_told_from_a_widening() -> None:
    from cdcsync.sync.shape import kind_changes

    was = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int", "s": "text"})
    widened = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "int", "s": "text", "new": "date"})
    retyped = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "text", "s": "text"})
    assert kind_changes(was, widened) == {}  # int -> bigint, varchar(n) -> text: the same kinds
    assert kind_changes(was, retyped) == {"v": ("int", "text")}
