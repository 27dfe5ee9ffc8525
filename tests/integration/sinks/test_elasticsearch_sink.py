"""The Elasticsearch sink against the real local server: apply rule, delete markers, rejected rows, bulk size.

Each test gets its own index prefix and deletes its indexes afterwards.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, date, datetime
from datetime import time as time_of_day
from decimal import Decimal
from typing import Any

import pytest
from elasticsearch import ConflictError, Elasticsearch

from cdcsync.errors import FatalError, TableError
from cdcsync.events import Change
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sinks import elasticsearch_generations
from cdcsync.sync.sinks import elasticsearch_reads as reads
from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
from tests.support import ENV

ES_URL = f"http://127.0.0.1:{ENV['ES_PORT']}"
TYPES = {
    "id": "int",
    "price": "decimal",
    "born": "date",
    "at": "timestamp",
    "opens": "time",
    "meta": "json",
    "blob": "bytes",
    "ok": "bool",
    "n": "int",
    "ratio": "float",
    "ref": "uuid",
}


def upsert(target: str, doc_id: int, version: int, **fields: Any) -> Row:
    doc = {"id": doc_id, **fields}
    change = Change("test", "public.items", "u", {"id": doc_id}, doc, None, version, "topic", 0, version)
    return Row(change, target, str(doc_id), doc)


def delete(target: str, doc_id: int, version: int) -> Row:
    change = Change("test", "public.items", "d", {"id": doc_id}, None, None, version, "topic", 0, version)
    return Row(change, target, str(doc_id), None)


def full_doc(i: int) -> dict[str, Any]:
    return {
        "name": f"item {i}",
        "price": Decimal("12.50"),
        "born": date(2024, 2, 29),
        "at": datetime(2024, 2, 29, 11, 45, 30, 123456, tzinfo=UTC),
        "opens": time_of_day(13, 45, 30, 123456),
        "meta": {"b": [1, 2], "a": {"nested": "yes"}},
        "blob": b"\x00\xffbytes",
        "ok": True,
        "n": 2**40,
        "ratio": 0.1,
        "ref": str(uuid.UUID(int=i)),
        "missing": None,
    }


def make_sink(prefix: str, target: str, **settings: Any) -> ElasticsearchSink:
    sink = ElasticsearchSink("es-test", ES_URL, index_prefix=prefix, index_settings=settings or None)
    sink.open([TableMapping("public.items", target, types=TYPES)])
    return sink


def visible(es: Elasticsearch, alias: str) -> int:
    es.indices.refresh(index=alias)
    return int(es.count(index=alias)["count"])


def test_open_creates_a_typed_index_behind_a_filtered_write_alias_and_is_idempotent(
    es: Elasticsearch, prefix: str
) -> None:
    sink = make_sink(prefix, "items")
    sink.open([TableMapping("public.items", "items", types=TYPES)])  # again: a no-op
    aliases = es.indices.get_alias(name=f"{prefix}items")
    assert list(aliases) == [f"{prefix}items-000001"]
    alias = aliases[f"{prefix}items-000001"]["aliases"][f"{prefix}items"]
    assert alias["is_write_index"] is True and "filter" in alias
    props = es.indices.get_mapping(index=f"{prefix}items")[f"{prefix}items-000001"]["mappings"]["properties"]
    assert {f: props[f]["type"] for f in ("price", "born", "at", "blob", "ok", "n", "ratio", "opens", "ref")} == {
        "price": "double",
        "born": "date",
        "at": "date",
        "blob": "binary",
        "ok": "boolean",
        "n": "long",
        "ratio": "double",
        "opens": "keyword",
        "ref": "keyword",
    }
    assert props["meta"].get("type", "object") == "object"
    assert props["cdcsync_version"]["type"] == "long" and props["cdcsync_deleted"]["type"] == "boolean"
    sink.close()


def test_upsert_reads_back_as_its_stored_form(es: Elasticsearch, prefix: str) -> None:
    sink = make_sink(prefix, "items")
    rows = [upsert("items", i, 100 + i, **full_doc(i)) for i in range(3)]
    result = sink.write(1, rows)
    assert (result.applied, result.older, result.rejected) == (3, 0, [])
    held = sink.held("items")
    assert held == {row.doc_id: (row.version, sink.stored_form(row.doc or {})) for row in rows}
    stored = held["1"][1]
    assert stored["price"] == "12.50" and stored["at"] == "2024-02-29T11:45:30.123456+00:00"
    assert stored["blob"] == "AP9ieXRlcw==" and stored["meta"] == {"a": {"nested": "yes"}, "b": [1, 2]}
    assert stored["missing"] is None and stored["n"] == 2**40
    assert visible(es, f"{prefix}items") == 3
    sink.close()


def test_make_visible_shows_a_batch_to_searches_at_once_unless_turned_off(es: Elasticsearch, prefix: str) -> None:
    # The index never refreshes by itself here: what a search sees is what make_visible showed it.
    for refresh_each_batch, target in ((True, "shown"), (False, "left")):
        sink = make_sink(prefix, target, refresh_interval="-1")
        sink.refresh_each_batch = refresh_each_batch
        sink.write(1, [upsert(target, i, 100 + i, **full_doc(i)) for i in range(3)])
        assert es.count(index=f"{prefix}{target}")["count"] == 0
        sink.make_visible([target])
        assert es.count(index=f"{prefix}{target}")["count"] == (3 if refresh_each_batch else 0), target
        sink.close()


def refresh_interval(es: Elasticsearch, index: str) -> str | None:
    found = es.indices.get_settings(index=index, name="index.refresh_interval", flat_settings=True)
    return found.get(index, {}).get("settings", {}).get("index.refresh_interval")  # None: not set, the default


@pytest.mark.parametrize("own", [None, "5s"])
def test_a_staged_index_fills_without_refreshes_and_publishes_with_its_own_interval(
    es: Elasticsearch, prefix: str, own: str | None
) -> None:
    sink = make_sink(prefix, "items", **({"refresh_interval": own} if own else {}))
    sink.stage([TableMapping("public.items", "items", types=TYPES)])
    staged = sink.index_of("items")
    assert refresh_interval(es, staged) == "-1"  # a bulk load: nobody searches a staged index
    sink.write(1, [upsert("items", i, 100 + i, **full_doc(i)) for i in range(5)])
    sink.publish()
    assert refresh_interval(es, staged) == own  # None: the server's default again
    assert es.count(index=f"{prefix}items")["count"] == 5  # refreshed before the alias moved
    assert list(es.indices.get_alias(name=f"{prefix}items")) == [staged]
    sink.close()


def test_a_publish_of_several_targets_moves_every_alias_and_drops_every_old_index(
    es: Elasticsearch, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bootstrap's publish: one alias request for all targets, one grace, the old indexes dropped in lists."""
    monkeypatch.setattr(elasticsearch_generations, "NAMES_PER_REQUEST", 1)  # one old index per delete request
    targets = ["items", "orders", "users"]
    mappings = [TableMapping(f"public.{t}", t, types=TYPES) for t in targets]
    live = ElasticsearchSink("es-test", ES_URL, index_prefix=prefix)
    live.open(mappings)
    for n, t in enumerate(targets):
        assert live.write(1, [upsert(t, i, 10, name=f"old {t}") for i in range(n + 1)]).applied == n + 1
    reindex = ElasticsearchSink("es-test", ES_URL, index_prefix=prefix)
    reindex.stage(mappings)
    for t in targets:
        assert reindex.write(1, [upsert(t, i, 20, name=f"new {t}") for i in range(3)]).applied == 3
    reindex.publish()
    for t in targets:
        alias = f"{prefix}{t}"
        assert list(es.indices.get_alias(name=alias)) == [f"{alias}-000002"]
        assert not es.indices.exists(index=f"{alias}-000001")
        assert {doc["name"] for _v, doc in live.held(t).values()} == {f"new {t}"}  # writers follow the alias
        assert visible(es, alias) == 3
    reindex.publish()  # nothing staged any more: a no-op
    live.close()
    reindex.close()


def test_delete_hides_the_row_and_a_replayed_older_write_does_not_resurrect_it_past_gc_deletes(
    es: Elasticsearch, prefix: str
) -> None:
    # gc_deletes 0s: ES forgets a deleted document's version at once, the trap the markers avoid.
    sink = make_sink(prefix, "items", **{"index.gc_deletes": "0s"})
    alias = f"{prefix}items"
    assert sink.write(1, [upsert("items", 1, 10, name="a"), upsert("items", 2, 10, name="b")]).applied == 2
    assert sink.write(2, [delete("items", 1, 20)]).applied == 1
    assert visible(es, alias) == 1
    assert set(sink.held("items")) == {"2"}
    assert es.search(index=alias, query={"ids": {"values": ["1"]}})["hits"]["hits"] == []

    time.sleep(1.5)  # past gc_deletes
    es.indices.refresh(index=alias)

    replay = sink.write(3, [upsert("items", 1, 10, name="a")])
    assert (replay.applied, replay.older) == (0, 1)
    assert visible(es, alias) == 1 and set(sink.held("items")) == {"2"}
    # The marker keeps the version; GET by id ignores alias filters, so readers by id check the flag.
    marker = es.get(index=alias, id="1")
    assert marker["_version"] == 20 and marker["_source"].pop("cdcsync_deleted_at") > 0  # when it was written
    assert marker["_source"] == {"cdcsync_deleted": True, "cdcsync_version": 20}
    sink.close()


def test_a_newer_upsert_after_a_delete_brings_the_row_back(es: Elasticsearch, prefix: str) -> None:
    sink = make_sink(prefix, "items")
    sink.write(1, [upsert("items", 1, 10, name="a")])
    sink.write(2, [delete("items", 1, 20)])
    assert sink.write(3, [delete("items", 1, 20)]).older == 1  # the delete redelivered
    assert sink.write(4, [upsert("items", 1, 20, name="same version as the delete")]).older == 1
    assert sink.write(5, [upsert("items", 1, 30, name="back")]).applied == 1
    assert sink.held("items") == {"1": (30, {"id": 1, "name": "back"})}
    assert visible(es, f"{prefix}items") == 1
    sink.close()


def test_a_row_that_conflicts_with_the_mapping_is_rejected_and_the_rest_applied(prefix: str) -> None:
    sink = make_sink(prefix, "items")
    rows = [
        upsert("items", 1, 10, n=5),
        upsert("items", 2, 10, n="not a number"),
        upsert("items", 3, 10, id="three"),
        upsert("items", 4, 10, n=6),
        # A date field keeps what it cannot index (ignore_malformed): a year past 9999 is a legal Postgres value.
        upsert("items", 5, 10, at="+10000-01-01T00:00:00+00:00"),
    ]
    result = sink.write(1, rows)
    assert (result.applied, result.older) == (3, 0)
    assert [row.doc_id for row, _ in result.rejected] == ["2", "3"]
    for _row, reason in result.rejected:
        assert reason.startswith("document_parsing_exception") or reason.startswith("mapper_parsing_exception")
    assert "[n]" in result.rejected[0][1] and "[id]" in result.rejected[1][1]
    assert set(sink.held("items")) == {"1", "4", "5"}
    assert sink.held("items")["5"][1]["at"] == "+10000-01-01T00:00:00+00:00"
    sink.close()


def test_writing_to_a_target_that_was_not_opened_fails_and_creates_no_index(es: Elasticsearch, prefix: str) -> None:
    sink = ElasticsearchSink("es-test", ES_URL, index_prefix=prefix)
    with pytest.raises(FatalError, match="open"):
        sink.write(1, [upsert("nowhere", 1, 10, name="a")])
    assert not es.indices.exists(index=f"{prefix}nowhere")
    assert sink.held("nowhere") == {}
    sink.close()


def test_the_control_write_in_the_gc_deletes_test_really_resurrects(es: Elasticsearch, prefix: str) -> None:
    """Without markers the trap is real: after gc_deletes a plain delete's version is gone."""
    alias = f"{prefix}ctl"
    make_sink(prefix, "ctl", **{"index.gc_deletes": "0s"}).close()
    es.index(index=alias, id="1", document={"name": "x"}, version=10, version_type="external")
    es.delete(index=alias, id="1", version=20, version_type="external")
    time.sleep(1.5)
    es.indices.refresh(index=alias)
    try:
        es.index(index=alias, id="1", document={"name": "old"}, version=15, version_type="external")
    except ConflictError:
        pytest.fail("ES still remembered the deleted version; the gc_deletes test would prove nothing")
    assert visible(es, alias) == 1


def test_reopening_with_a_changed_column_type_is_that_table_s_refusal_asking_for_a_reindex(prefix: str) -> None:
    make_sink(prefix, "items").close()
    sink = ElasticsearchSink("es-test", ES_URL, index_prefix=prefix)
    with pytest.raises(TableError, match="reindex") as refused:  # the follower holds that table alone (sync.held)
        sink.open([TableMapping("public.items", "items", types={**TYPES, "n": "date"})])
    assert (
        refused.value.target == "items"
        and refused.value.fix == "run `cdcsync reindex es-test --table items --from source`"
    )
    sink.open([TableMapping("public.items", "items", types={**TYPES, "added": "decimal"})])  # additive: fine
    sink.close()


def test_an_index_whose_decimals_an_earlier_release_mapped_keyword_still_opens_and_says_how_to_upgrade(
    es: Elasticsearch, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    alias = f"{prefix}items"
    es.indices.create(
        index=f"{alias}-000001",
        mappings={"properties": {"price": {"type": "keyword"}}},
        aliases={alias: {"is_write_index": True}},
    )
    sink = ElasticsearchSink("es-test", ES_URL, index_prefix=prefix)
    with caplog.at_level("WARNING"):
        sink.open([TableMapping("public.items", "items", types=TYPES)])  # no FatalError: the old field stays
    assert "cdcsync reindex es-test" in caplog.text and "['price']" in caplog.text
    props = es.indices.get_mapping(index=alias)[f"{alias}-000001"]["mappings"]["properties"]
    assert props["price"] == {"type": "keyword"} and props["born"]["type"] == "date"  # the rest is added
    assert sink.write(1, [upsert("items", 1, 5, price=Decimal("12.50"))]).applied == 1
    assert sink.held("items")["1"][1]["price"] == "12.50"
    sink.close()


@pytest.mark.parametrize("slices", [2, 3])
def test_a_scan_in_slices_reads_every_live_document_once(
    es: Elasticsearch, prefix: str, slices: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a large index's scan does (``elasticsearch_reads.SLICED_DOCS``), on a small one."""
    sink = make_sink(prefix, "items")
    sink.write(1, [upsert("items", i, 10, name=f"n{i}") for i in range(2500)])
    sink.write(2, [delete("items", i, 20) for i in range(0, 2500, 7)])  # markers: never read back
    sink.make_visible(["items"])
    whole = sink.held("items")
    monkeypatch.setattr(reads, "SLICED_DOCS", 0)
    monkeypatch.setattr(reads, "SLICES", slices)
    monkeypatch.setattr(reads, "PAGE", 100)
    monkeypatch.setattr(reads, "SCAN_PAGES", (50, 100))  # many pages per slice
    read = list(sink.scan("items"))
    assert len(read) == len({ident for ident, _, _ in read}) == 2500 - len(range(0, 2500, 7))
    assert {ident: (version, doc) for ident, version, doc in read} == whole
    sink.close()
