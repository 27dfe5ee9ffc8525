"""Index settings and the delete-marker purge of the Elasticsearch sink, against the real local server.

Each test gets its own index prefix and deletes its indexes afterwards. The local distribution has no
analysis-common module: a custom analyzer of the standard tokenizer and the lowercase filter is what it can build.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from elasticsearch import Elasticsearch
from prometheus_client import REGISTRY

from cdcsync.config import Config
from cdcsync.config.index import IndexSettings
from cdcsync.errors import FatalError
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.marker_purge import MarkerPurge
from cdcsync.sync.sinks import elasticsearch_markers
from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
from cdcsync.sync.sinks.elasticsearch_index import IndexSpec, IndexSpecs
from tests.integration.sinks.test_elasticsearch_sink import ES_URL, delete, upsert
from tests.support import ENV, uid

TYPES = {"id": "int", "name": "text", "n": "int"}
FOLDED = {"analysis": {"analyzer": {"folded": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}}}
NAME = {"type": "text", "analyzer": "folded", "fields": {"raw": {"type": "keyword"}}}


def spec(**settings: Any) -> IndexSpec:
    return IndexSpec.of(IndexSettings.model_validate(settings))


def sink_for(prefix: str, target_spec: IndexSpec | None = None, drift: list[Any] | None = None) -> ElasticsearchSink:
    indexes = IndexSpecs(by_target={"items": target_spec} if target_spec else None)
    on_drift = (lambda target, what: drift.append((target, what))) if drift is not None else None
    return ElasticsearchSink("es-test", ES_URL, index_prefix=prefix, indexes=indexes, on_drift=on_drift)


MAPPINGS = [TableMapping("public.items", "items", types=TYPES)]


def settings_of(es: Elasticsearch, index: str) -> dict[str, Any]:
    found: dict[str, Any] = es.indices.get_settings(index=index, flat_settings=True)[index]["settings"]
    return found


def fields_of(es: Elasticsearch, index: str) -> dict[str, Any]:
    found: dict[str, Any] = es.indices.get_mapping(index=index)[index]["mappings"]["properties"]
    return found


def markers(es: Elasticsearch, alias: str) -> dict[str, dict[str, Any]]:
    """The delete markers behind ``alias`` (the alias's filter hides them: searched on its indexes)."""
    names = ",".join(es.indices.get_alias(name=alias))
    es.indices.refresh(index=names)
    hits = es.search(index=names, query={"term": {"cdcsync_deleted": True}}, size=100, version=True)["hits"]["hits"]
    return {hit["_id"]: {**hit["_source"], "_version": hit["_version"]} for hit in hits}


def test_open_and_stage_create_indexes_with_the_configured_shards_replicas_analyzer_and_fields(
    es: Elasticsearch, prefix: str
) -> None:
    configured = spec(
        shards=2,
        replicas=1,
        settings={**FOLDED, "refresh_interval": "7s"},
        mappings={"properties": {"name": NAME, "sku": {"type": "keyword"}}},
    )
    sink = sink_for(prefix, configured)
    sink.open(MAPPINGS)
    live = f"{prefix}items-000001"
    held = settings_of(es, live)
    assert (held["index.number_of_shards"], held["index.number_of_replicas"]) == ("2", "1")
    assert held["index.analysis.analyzer.folded.filter"] == ["lowercase"] and held["index.refresh_interval"] == "7s"
    fields = fields_of(es, live)
    assert fields["name"] == NAME and fields["sku"] == {"type": "keyword"} and fields["n"] == {"type": "long"}
    assert fields["cdcsync_deleted_at"] == {"type": "date", "format": "epoch_millis"}
    sink.write(1, [upsert("items", 1, 10, name="Crème BRÛLÉE Tart", n=1)])
    sink.make_visible(["items"])
    found = es.search(index=f"{prefix}items", query={"match": {"name": "brûlée"}})["hits"]["hits"]
    assert [hit["_id"] for hit in found] == ["1"]  # the folded analyzer: lower-cased at index and at search

    sink.stage(MAPPINGS)  # a bootstrap's or reindex's new generation: the same settings, without refreshes
    staged = sink.index_of("items")
    held = settings_of(es, staged)
    assert (held["index.number_of_shards"], held["index.refresh_interval"]) == ("2", "-1")
    assert fields_of(es, staged)["name"] == NAME
    sink.publish()
    assert settings_of(es, staged)["index.refresh_interval"] == "7s"
    sink.close()


def test_a_live_index_takes_what_it_can_in_place_and_reports_what_needs_a_new_one(
    es: Elasticsearch, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = sink_for(prefix)
    first.open(MAPPINGS)  # as an earlier config made it: 1 shard, cdcsync's own field mappings
    first.close()
    live = f"{prefix}items-000001"
    changed = spec(
        shards=2,
        replicas=1,
        settings={**FOLDED, "refresh_interval": "3s", "max_result_window": 20000, "codec": "best_compression"},
        mappings={"properties": {"name": NAME, "tag": {"type": "keyword"}}},
    )
    drift: list[Any] = []
    sink = sink_for(prefix, changed, drift)
    with caplog.at_level(logging.WARNING):
        sink.open(MAPPINGS)
    sink.close()
    held = settings_of(es, live)
    assert (held["index.number_of_replicas"], held["index.refresh_interval"]) == ("1", "3s")  # in place
    assert held["index.max_result_window"] == "20000"
    assert held["index.number_of_shards"] == "1" and "index.codec" not in held  # left for a new index
    fields = fields_of(es, live)
    assert fields["tag"] == {"type": "keyword"} and "analyzer" not in fields["name"]  # a new field, in place
    ((target, what),) = drift
    assert target == "items"
    for expected in (
        "index.number_of_shards is 1, configured 2",
        "index.analysis.analyzer.folded.type is unset, configured custom",
        "index.codec is unset, configured best_compression",
        "field name is mapped",
    ):
        assert expected in what, what
    assert "run `cdcsync reindex es-test --table items`" in caplog.text

    drift.clear()
    as_held = spec(
        replicas=1, settings={"refresh_interval": "3s"}, mappings={"properties": {"tag": {"type": "keyword"}}}
    )
    sink = sink_for(prefix, as_held, drift)
    sink.open(MAPPINGS)
    sink.close()
    assert drift == [("items", None)]  # nothing left that only a new index takes: the record is cleared

    sink = sink_for(prefix, spec(settings={"no_such_setting": 1}))
    with pytest.raises(FatalError, match=r"refused the configured settings \['index.no_such_setting'\]"):
        sink.open(MAPPINGS)
    sink.close()


def test_markers_older_than_the_horizon_go_newer_ones_and_rows_recreated_after_their_delete_stay(
    es: Elasticsearch, prefix: str
) -> None:
    sink = sink_for(prefix)
    sink.open(MAPPINGS)
    alias = f"{prefix}items"
    assert sink.write(1, [upsert("items", i, 10, name=f"row {i}") for i in range(1, 7)]).applied == 6
    assert sink.write(2, [delete("items", i, 20) for i in (1, 2, 3)]).applied == 3
    time.sleep(2.5)
    assert sink.write(3, [delete("items", i, 20) for i in (4, 5)]).applied == 2  # younger than the horizon
    assert sink.write(4, [upsert("items", 3, 30, name="back")]).applied == 1  # re-created: no longer a marker
    held = markers(es, alias)
    assert set(held) == {"1", "2", "4", "5"} and all(isinstance(m["cdcsync_deleted_at"], int) for m in held.values())

    done = sink.purge_markers("items", horizon_s=2)
    assert (done.purged, done.stamped, done.changed) == (2, 0, 0)
    assert set(markers(es, alias)) == {"4", "5"}
    assert {ident: version for ident, (version, _doc) in sink.held("items").items()} == {"3": 30, "6": 10}
    # Elasticsearch keeps the purged marker's own version for gc_deletes: an older write is still refused then,
    # and a newer one taken.
    assert sink.write(5, [upsert("items", 1, 15, name="older")]).older == 1
    assert sink.write(6, [upsert("items", 2, 21, name="newer")]).applied == 1
    assert sink.purge_markers("items", horizon_s=2).purged == 0  # nothing more, nothing else
    sink.close()


def test_a_row_recreated_while_the_purge_runs_is_never_removed(
    es: Elasticsearch, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = sink_for(prefix)
    sink.open(MAPPINGS)
    sink.write(1, [upsert("items", i, 10, name=f"row {i}") for i in (1, 2)])
    sink.write(2, [delete("items", i, 20) for i in (1, 2)])
    original = elasticsearch_markers._bulk

    def live_write_first(client: Any, operations: list[dict[str, Any]], names: str) -> tuple[int, int]:
        # The stream re-creates row 2 after the purge found its marker and before the purge deletes it.
        sink.write(3, [upsert("items", 2, 30, name="re-created")])
        return original(client, operations, names)

    monkeypatch.setattr(elasticsearch_markers, "_bulk", live_write_first)
    done = sink.purge_markers("items", horizon_s=0, now=time.time() + 1)
    assert (done.purged, done.changed) == (1, 1)
    assert sink.held("items") == {"2": (30, {"id": 2, "name": "re-created"})}
    sink.close()


def test_markers_an_earlier_release_wrote_without_a_time_are_stamped_then_purged_a_horizon_later(
    es: Elasticsearch, prefix: str
) -> None:
    sink = sink_for(prefix)
    sink.open(MAPPINGS)
    alias = f"{prefix}items"
    for i in (1, 2):  # as markers were written before they held a time
        es.index(index=alias, id=str(i), document={"cdcsync_deleted": True, "cdcsync_version": 20}, version=20,
                 version_type="external")  # fmt: skip
    now = time.time()
    done = sink.purge_markers("items", horizon_s=60, now=now)
    assert (done.purged, done.stamped) == (0, 2)  # never purged at once: their real age is unknown
    held = markers(es, alias)
    assert {m["cdcsync_deleted_at"] for m in held.values()} == {int(now * 1000)}
    assert {m["_version"] for m in held.values()} == {20}  # stamped at their own version
    assert sink.purge_markers("items", horizon_s=60, now=now + 30).purged == 0
    assert sink.purge_markers("items", horizon_s=60, now=now + 61).purged == 2
    assert markers(es, alias) == {}
    sink.close()


def test_the_daemons_purge_round_purges_each_table_past_its_sources_horizon_and_counts_it(
    es: Elasticsearch, prefix: str
) -> None:
    source = {"name": f"s{uid()}", "kind": "postgres", "port": int(ENV["PG_PORT"]), "database": "app", "user": "u",
              "password": "p", "tables": ["public.items"], "compaction_horizon_s": 10}  # fmt: skip
    follower = {"name": "search", "kind": "elasticsearch", "url": ES_URL, "prefix": prefix}
    config = Config.model_validate({"sources": [source], "followers": [follower]})
    sink = ElasticsearchSink.from_config(config, config.followers[0])
    sink.open(MAPPINGS)
    sink.write(1, [upsert("items", i, 10, name=f"row {i}") for i in (1, 2, 3)])
    sink.write(2, [delete("items", i, 20) for i in (1, 2)])
    purge = MarkerPurge(config, list(config.followers))
    labels = {"follower": "search", "table": "public.items"}
    before = REGISTRY.get_sample_value("cdcsync_delete_markers_purged_total", labels) or 0.0
    assert purge.tick() == {("search", "public.items"): 0}  # written just now: within the 10 s horizon
    assert purge.tick(now=time.time() + 11) == {("search", "public.items"): 2}
    assert REGISTRY.get_sample_value("cdcsync_delete_markers_purged_total", labels) == before + 2
    assert markers(es, f"{prefix}items") == {} and set(sink.held("items")) == {"3"}
    sink.close()
