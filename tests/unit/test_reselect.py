"""Which values a follower reads again from the source (``sync.reselect``), on plain data.

The source's answers are given here; the real Postgres, Debezium and all three
stores are in tests/integration/test_verify_edges.py.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from cdcsync.config import SourceConfig, TableRef
from cdcsync.events import Change
from cdcsync.sync import reselect
from cdcsync.sync.mapping import Row, TableMapping

TOPIC = "src.public.t"
MAPPING = TableMapping("public.t", "t", ("id",), types={"id": "int", "nums": "array", "d": "date", "v": "int"})
SOURCE = SourceConfig.model_validate(
    {"name": "src", "kind": "postgres", "host": "127.0.0.1", "port": 1, "database": "d", "user": "u",
     "password": "p", "tables": ["public.t"]}
)  # fmt: skip


def row(ident: int, op: str, doc: dict[str, Any], partition: int = 0) -> Row:
    change = Change("src", "public.t", op, {"id": ident}, doc, None, ident, TOPIC, partition, ident)
    return Row(change, "t", str(ident), {"id": ident, **doc})


class Source(reselect.Reselector):
    """The source as this test has it: ``nums`` a numeric[], row 1 holding NaN and a BC date, row 2 gone."""

    def __init__(self, down: bool = False) -> None:
        super().__init__({TOPIC: (SOURCE, TableRef(namespace="public", table="t"))})
        self.down, self.asked = down, []  # type: list[set[str]]
        self.there = {"1": {"id": 1, "nums": [Decimal("NaN"), Decimal("1.50")], "d": "0044-03-15 BC", "v": 9}}

    def _numeric_arrays(self, topic: str, mapping: TableMapping) -> frozenset[str]:
        if self.down:
            raise ConnectionError("source src unreachable")
        return frozenset({"nums"})

    def _bc_row(self, topic: str, mapping: TableMapping, ident: str) -> bool:
        return ident in self.there

    def _rows(self, topic: str, source: Any, table: Any, mapping: TableMapping, ids: set[str]) -> dict[str, Any]:
        self.asked.append(ids)
        return {i: self.there[i] for i in ids if i in self.there}


def test_a_null_numeric_array_is_read_again_as_debezium_writes_its_elements() -> None:
    source = Source()
    [out] = source([row(1, "u", {"nums": None, "d": date(2020, 1, 1), "v": 1})], {TOPIC: MAPPING})
    assert out.doc == {"id": 1, "nums": ["NaN", "1.50"], "d": date(2020, 1, 1), "v": 1}  # only nums taken
    assert source.asked == [{"1"}]


def test_a_snapshot_row_holding_a_date_before_year_1_takes_its_dates_from_the_source() -> None:
    source = Source()
    snapshot = row(1, "r", {"nums": ["2"], "d": date(44, 3, 15), "v": 1})
    streamed = row(1, "u", {"nums": ["2"], "d": "-0043-03-15", "v": 1})
    copied = row(1, "r", {"nums": ["2"], "d": "-0043-03-15", "v": 1}, partition=-1)  # a source copy reads right
    [fixed] = source([snapshot], {TOPIC: MAPPING})
    assert fixed.doc == {"id": 1, "nums": ["2"], "d": "-0043-03-15", "v": 1}
    assert source([streamed, copied], {TOPIC: MAPPING}) == [streamed, copied] and source.asked == [{"1"}]


def test_a_row_gone_from_the_source_keeps_the_change_s_values() -> None:
    gone = row(2, "u", {"nums": None, "d": None, "v": 1})
    assert Source()([gone], {TOPIC: MAPPING}) == [gone]


def test_a_source_that_cannot_be_read_leaves_the_values_and_is_asked_again_a_minute_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = Source(down=True)
    rows = [row(1, "u", {"nums": None, "d": None, "v": 1})]
    assert source(rows, {TOPIC: MAPPING}) == rows
    source.down = False
    assert source(rows, {TOPIC: MAPPING}) == rows  # not asked again yet: a follower never waits for its source
    monkeypatch.setattr(reselect, "BC_TTL_S", 0.0)
    source._failed.clear()
    assert source(rows, {TOPIC: MAPPING})[0].doc["nums"] == ["NaN", "1.50"]  # type: ignore[index]
