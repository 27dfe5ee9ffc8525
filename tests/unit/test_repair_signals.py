"""snapshot.repair: divergent keys cut into signals that fit the signal table, or the whole table."""

from __future__ import annotations

import json

from cdcsync.config import SourceConfig, TableRef
from cdcsync.connectors.signals import SIGNAL_DATA, signal_data
from cdcsync.snapshot import repair
from cdcsync.snapshot.repair import Plan, _signal_filters
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.verify.compare import TableReport

PG = SourceConfig(name="pg", kind="postgres", port=5432, database="d", user="u", password="x", tables=["public.t"])
MAPPING = TableMapping("public.t", "t", key_columns=("id",), types={"id": "int"})


def plan(mapping: TableMapping = MAPPING) -> Plan:
    return Plan(PG, TableRef(namespace="public", table="t"), mapping, TableReport("f", "pg.public.t", "t"))


def test_keys_go_in_as_few_signals_as_fit_and_every_key_in_exactly_one() -> None:
    ids = [str(i) for i in range(1000, 1600)]
    wheres = _signal_filters(plan(), ids)
    assert wheres is not None and 1 < len(wheres) <= repair.SIGNALS_PER_TABLE
    for where in wheres:
        assert len(signal_data([plan().table], where)) <= SIGNAL_DATA
        assert json.loads(signal_data([plan().table], where))["additional-conditions"][0]["filter"] == f"({where})"
    listed = [part.strip(" '()") for where in wheres for part in (where or "").split(" IN ", 1)[1].split(",")]
    assert listed == ids


def test_too_many_keys_or_a_key_too_long_for_a_signal_is_the_whole_table() -> None:
    assert _signal_filters(plan(), [str(i) for i in range(10**6, 10**6 + 20_000)]) is None
    text = TableMapping("public.t", "t", key_columns=("k",), types={})
    assert _signal_filters(plan(text), ["short", "x" * 3000]) is None
    assert _signal_filters(plan(TableMapping("public.t", "t")), ["1"]) is None  # no key known
