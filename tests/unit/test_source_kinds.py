"""The source contract, over every kind the registry lists: what each kind must say, without a server.

A new kind passes these by being registered in ``cdcsync.sources.KINDS`` with
its roles whole, and by recording its connector's events in
``fixtures/<kind>.jsonl`` (``fixtures/record.py``). What needs the servers is in
``tests/integration/test_source_contract.py``.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from cdcsync.config import SourceConfig
from cdcsync.events import parse_record
from cdcsync.sources import CONNECTORS, KINDS, for_connector, kind_of
from cdcsync.sources.kind import SourceKind
from cdcsync.sync.verify.ranges import SPARK_FORMS

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATES = Path(__file__).resolve().parents[2] / "connectors" / "templates"
EVERY_KIND = pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))


def _source(kind: SourceKind, **extra: object) -> SourceConfig:
    return SourceConfig.model_validate(
        {"name": "src", "kind": kind.name, "port": 1, "database": "db", "user": "u", "password": "p", **extra}
        | {"tables": extra.get("tables", ["t"])}
    )


@EVERY_KIND
def test_every_role_of_a_kind_is_whole(kind: SourceKind) -> None:
    """No abstract method left: a kind that misses one cannot be built, let alone asked."""
    assert not inspect.isabstract(type(kind))
    for role in (kind.capture, kind.reads, kind.changes, kind.checksums):
        assert not inspect.isabstract(type(role)), f"{kind.name}: {type(role).__name__} leaves methods abstract"
    assert kind_of(kind.name) is kind


@EVERY_KIND
def test_a_config_of_a_kind_takes_its_defaults_from_it(kind: SourceKind) -> None:
    source = _source(kind)
    assert source.tables[0].namespace == kind.default_namespace("db")
    assert source.signal_namespace == kind.default_namespace("db")
    for setting, value in kind.settings_defaults(source).items():
        assert getattr(source, setting) == value
    named = kind.settings_defaults(_source(kind, slot="s", publication="p", server_id=7))
    assert all(value in ("s", "p", 7) for value in named.values()), "a setting the config names is kept"


def test_a_kind_the_registry_does_not_list_is_refused_naming_the_kinds() -> None:
    with pytest.raises(ValueError) as err:
        SourceConfig.model_validate(
            {"name": "s", "kind": "oracle", "port": 1, "database": "db", "user": "u", "password": "p", "tables": ["t"]}
        )
    assert all(f"'{name}'" in str(err.value) for name in KINDS)


@EVERY_KIND
def test_names_and_literals_are_quoted_whatever_they_hold(kind: SourceKind) -> None:
    mark = kind.quote_mark
    assert kind.quote(f"a{mark}b") == f"{mark}a{mark * 2}b{mark}"
    table = _source(kind).tables[0]
    assert kind.qualified(table) == f"{mark}{table.namespace}{mark}.{mark}t{mark}"
    assert kind.text_literal("o'neil").startswith("'") and "o''neil" in kind.text_literal("o'neil")
    assert kind.bytes_literal("AAE=") != kind.text_literal("AAE=")


def test_each_debezium_connector_belongs_to_one_kind() -> None:
    named = [c for kind in KINDS.values() for c in kind.connectors]
    assert len(named) == len(set(named)) == len(CONNECTORS)
    for kind in KINDS.values():
        assert all(for_connector(c) is kind for c in kind.connectors)
    assert for_connector("oracle") is None and for_connector(None) is None


@EVERY_KIND
def test_a_kind_s_recorded_events_parse_and_order_each_key(kind: SourceKind) -> None:
    """Every change its connector wrote (recorded on this stack) becomes a change of its table, and each key's
    versions grow in log order: the apply rule's whole premise."""
    path = FIXTURES / f"{kind.name}.jsonl"
    assert path.exists(), f"record {kind.name}'s events into {path} (tests/unit/fixtures/record.py)"
    newest: dict[tuple[str, str], int] = {}
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        value = raw["value"].encode() if raw.get("value") is not None else None
        change = parse_record(raw["topic"], raw["partition"], raw["offset"], raw["key"].encode(), value)
        if change is None:
            continue
        block = json.loads(raw["value"])["source"]
        assert for_connector(block["connector"]) is kind
        assert change.table.split(".")[0] == kind.changes.namespace(block)
        key = (change.table, json.dumps(change.key, sort_keys=True))
        assert change.version > newest.get(key, -1), f"{kind.name}: {key} went back at offset {raw['offset']}"
        newest[key] = change.version
    assert newest, f"{path} holds no change"


@EVERY_KIND
def test_a_kind_names_its_connector_and_the_template_it_renders(kind: SourceKind) -> None:
    assert kind.capture.connector_class.startswith("io.debezium.connector.")
    assert (TEMPLATES / f"{kind.capture.template}.json").exists()


@EVERY_KIND
def test_a_kind_s_checksum_forms_meet_spark_s(kind: SourceKind) -> None:
    """Every (data type, kind) a kind writes a text for is a kind Spark writes one for, or ranges never match."""
    sums = kind.checksums
    assert sums.forms and sums.key_types
    assert {mapped for _type, mapped in sums.forms} <= set(SPARK_FORMS)
    assert all("{c}" in form for form in sums.forms.values())
    assert all("{t}" in piece and "'~'" in piece for piece in sums.pieces)


@EVERY_KIND
def test_a_kind_reads_over_jdbc(kind: SourceKind) -> None:
    source = _source(kind)
    assert kind.reads.jdbc_driver and kind.reads.jdbc_url(source).startswith("jdbc:")
    assert kind.reads.snapshot(source).source is source
    assert "%" not in kind.reads.hash_bucket([kind.quote("a"), kind.quote("b")])
