"""Elasticsearch index settings in the config: shape, merging, refusals with their paths; and how drift is recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcsync.config import Config
from cdcsync.config.file import load_config
from cdcsync.config.index import INDEX_OWN_FIELDS, IndexSettings
from cdcsync.errors import ConfigError
from cdcsync.sync import reindex_needed
from cdcsync.sync.marker_purge import PURGE_EVERY_S, MarkerPurge
from cdcsync.sync.sinks.elasticsearch_fields import OWN_FIELDS
from cdcsync.sync.sinks.elasticsearch_index import IndexSpec, IndexSpecs, drift_recorder

SOURCE = {
    "name": "pg",
    "kind": "postgres",
    "port": 5432,
    "database": "app",
    "user": "u",
    "password": "p",
    "tables": ["items", "orders"],
}
ANALYSIS = {"analysis": {"analyzer": {"folded": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}}}


def es(**extra: Any) -> dict[str, Any]:
    return {"name": "search", "kind": "elasticsearch", "url": "http://127.0.0.1:9200", **extra}


def load(tmp_path: Path, *followers: dict[str, Any], **source: Any) -> Config:
    path = tmp_path / "cdcsync.yaml"
    doc = {"sources": [{**SOURCE, **source}], "followers": list(followers), "state_dir": str(tmp_path)}
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={})


def problems(tmp_path: Path, *followers: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, *followers)
    return "\n".join(err.value.problems)


def test_a_tables_index_settings_go_over_the_followers_key_by_key(tmp_path: Path) -> None:
    follower = es(
        index={"shards": 2, "replicas": 1, "settings": {"refresh_interval": "5s", **ANALYSIS},
               "mappings": {"properties": {"name": {"type": "text", "analyzer": "folded"}}}},
        mappings={"public.items": {"target": "things", "index": {
            "replicas": 0, "settings": {"index": {"refresh_interval": "1s"}},
            "mappings": {"properties": {"sku": {"type": "keyword"}}}}}},
    )  # fmt: skip
    config = load(tmp_path, follower)
    cfg = config.followers[0]
    source, (items, orders) = config.sources[0], config.sources[0].tables
    merged = cfg.index_for(source.name, items)
    assert (merged.shards, merged.replicas) == (2, 0)
    assert merged.flat()["index.refresh_interval"] == "1s"
    assert merged.flat()["index.analysis.analyzer.folded.filter"] == ["lowercase"]
    assert set(merged.mappings.properties) == {"name", "sku"}
    assert cfg.index_for(source.name, orders) == cfg.index  # no mapping of its own: the follower's
    specs = IndexSpecs.of_config(config, cfg)
    assert set(specs.by_target) == {"things", "orders"}
    assert specs.of("things").create_settings() == {
        "index.number_of_shards": 2, "index.number_of_replicas": 0, **merged.flat()
    }  # fmt: skip
    staged = specs.of("things").create_settings(fill=True)
    assert staged["index.refresh_interval"] == "-1" and specs.of("things").refresh_interval == "1s"


def test_unset_counts_create_one_shard_no_replica_and_leave_a_live_index_alone() -> None:
    spec = IndexSpec.of(IndexSettings())
    assert spec.create_settings() == {"index.number_of_shards": 1, "index.number_of_replicas": 0}
    assert spec.configured() == {} and spec.refresh_interval is None
    assert IndexSpecs.of_settings({"index.gc_deletes": "0s"}).of("any").settings == {"index.gc_deletes": "0s"}


def test_index_settings_on_a_redis_or_delta_follower_are_refused_naming_the_path(tmp_path: Path) -> None:
    redis = {"name": "cache", "kind": "redis", "url": "redis://127.0.0.1:6379/0",
             "mappings": {"public.items": {"index": {"shards": 2}}}}  # fmt: skip
    delta = {"name": "lake", "kind": "delta", "index": {"replicas": 1}}
    text = problems(tmp_path, es(), redis, delta)
    assert "followers[1]" in text and "mappings.'public.items'.index: index settings are for kind elasticsearch" in text
    assert "followers[2]" in text and "follower lake: index: index settings are for kind elasticsearch" in text


@pytest.mark.parametrize("field", [*INDEX_OWN_FIELDS, "cdcsync_version.sub"])
def test_a_field_mapping_may_not_redefine_cdcsyncs_own_fields(tmp_path: Path, field: str) -> None:
    text = problems(
        tmp_path,
        es(mappings={"public.items": {"index": {"mappings": {"properties": {field: {"type": "keyword"}}}}}}),
    )
    assert "followers[0].mappings.public.items.index.mappings.properties" in text
    assert f"{field}: cdcsync writes cdcsync_version, cdcsync_deleted, cdcsync_deleted_at, cdcsync_key itself" in text


def test_counts_in_free_form_settings_empty_field_mappings_and_bad_counts_are_refused(tmp_path: Path) -> None:
    for settings, key in (({"number_of_shards": 3}, "shards"), ({"index": {"number_of_replicas": 2}}, "replicas")):
        text = problems(tmp_path, es(index={"settings": settings}))
        assert "followers[0].index.settings" in text and f"set it as index.{key}" in text
    assert "an empty mapping" in problems(tmp_path, es(index={"mappings": {"properties": {"name": {}}}}))
    text = problems(tmp_path, es(index={"shards": 0, "replicas": -1, "typo": 1}))
    for expected in ("followers[0].index.shards", "followers[0].index.replicas", "followers[0].index.typo"):
        assert expected in text


def test_the_sinks_own_fields_are_the_ones_the_config_protects() -> None:
    assert OWN_FIELDS == INDEX_OWN_FIELDS


def test_settings_drift_is_recorded_for_a_reindex_from_the_topics_and_cleared_when_gone(tmp_path: Path) -> None:
    config = load(tmp_path, es(mappings={"public.items": {"target": "things"}}))
    record = drift_recorder(config, config.followers[0])
    record("things", "index.number_of_shards is 1, configured 2")
    record("nobody's", "ignored")
    assert reindex_needed.lines(config, "search") == [
        "follower search: table public.items needs a reindex (index settings: index.number_of_shards is 1, "
        "configured 2): run `cdcsync reindex search --table public.items`"
    ]
    record("things", None)
    assert reindex_needed.needed(config, "search") == {}


def test_an_entry_that_needs_the_source_is_never_downgraded_and_only_topic_entries_clear_by_topics(
    tmp_path: Path,
) -> None:
    config = Config.model_validate({"state_dir": str(tmp_path)})
    reindex_needed.mark(config, "search", "public.t", "columns ['v'] went and ['w'] came")
    reindex_needed.record(config, "search", "public.t", "index settings: shards", origin="topics")
    reindex_needed.record(config, "search", "public.u", "index settings: shards", origin="topics")
    assert reindex_needed.needed(config, "search")["public.t"]["reason"] == "columns ['v'] went and ['w'] came"
    reindex_needed.clear(config, "search", origin="topics")  # a reindex from the topics
    assert list(reindex_needed.needed(config, "search")) == ["public.t"]
    reindex_needed.record(config, "search", "public.u", "index settings: shards", origin="topics")
    reindex_needed.clear(config, "search")  # from the source: every entry
    assert reindex_needed.needed(config, "search") == {}


def test_the_purge_round_takes_elasticsearch_followers_and_runs_ten_times_a_horizon(tmp_path: Path) -> None:
    redis = {"name": "cache", "kind": "redis", "url": "redis://127.0.0.1:6379/0"}
    config = load(tmp_path, es(), redis, compaction_horizon_s=600)
    purge = MarkerPurge(config, list(config.followers))
    assert [f.name for f in purge.followers] == ["search"] and purge.every_s == 60
    week = load(tmp_path, es())  # the default horizon, 7 days: hourly
    assert MarkerPurge(week, list(week.followers)).every_s == PURGE_EVERY_S
