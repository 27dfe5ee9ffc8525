"""A follower's index settings and delete-marker purge, end to end: source, capture, topics, Elasticsearch.

A changed setting that only a new index takes is reported at the follower's start and applied by `reindex`;
after the daemon's purge step removes markers older than the source's horizon, the store still equals its
source, and so it does after the whole log is replayed into it again (every older write of a deleted row is
followed by its delete in the log).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from cdcsync.config import Config
from cdcsync.snapshot import replay as engine
from cdcsync.snapshot.reindex import reindex
from cdcsync.sync import reindex_needed
from cdcsync.sync.build import build_follower
from cdcsync.sync.marker_purge import MarkerPurge
from tests.integration.followers import numbered_table, scenario
from tests.support import ENV, execute, uid

FOLDED = {"analysis": {"analyzer": {"folded": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}}}
HORIZON_S = 10


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-index-settings-tests")
    yield session
    session.stop()


def markers(es: Elasticsearch, alias: str) -> set[str]:
    """Ids of the delete markers behind ``alias`` (its filter hides them: searched on its indexes)."""
    names = ",".join(es.indices.get_alias(name=alias))
    es.indices.refresh(index=names)
    hits = es.search(index=names, query={"term": {"cdcsync_deleted": True}}, size=1000)["hits"]["hits"]
    return {hit["_id"] for hit in hits}


def test_a_changed_index_setting_is_reported_applied_by_reindex_and_the_store_converges_after_a_purge(
    spark: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    t = f"ix_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, 40)) as sc:
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        alias = f"{sc.config.follower('search').prefix}{t}"
        sc.run_once("search")
        execute("postgres", f"DELETE FROM {t} WHERE id <= 10", f"UPDATE {t} SET v = v + 100 WHERE id > 30")
        execute("postgres", f"INSERT INTO {t} VALUES (5, 555)")  # deleted, then re-created
        sc.run_once("search")
        deleted = {str(i) for i in range(1, 11) if i != 5}
        assert markers(es, alias) == deleted

        # The config changes: shards and an analyzer only a new index takes, a refresh interval it takes in place.
        # The source's horizon is a tiny one from here on (the topics keep theirs: nothing is compacted).
        raw = copy.deepcopy(sc.raw)
        for source in raw["sources"]:
            source["compaction_horizon_s"] = HORIZON_S
        search = next(f for f in raw["followers"] if f["name"] == "search")
        search["index"] = {"settings": {"refresh_interval": "2s"}}  # every table's, the tick table's too
        note = {"properties": {"note": {"type": "keyword"}}}
        # gc_deletes 0 s: Elasticsearch forgets a deleted document's version at once, so the replay below finds
        # nothing of a purged marker left, as it would a minute after a purge.
        settings = {**FOLDED, "gc_deletes": "0s"}
        search["mappings"] = {f"public.{t}": {"index": {"shards": 2, "settings": settings, "mappings": note}}}
        changed = Config.model_validate(raw)
        cfg = changed.follower("search")
        with caplog.at_level(logging.WARNING):
            started = build_follower(changed, cfg, spark)  # as the daemon starts it
        started.sink.close()
        (line,) = reindex_needed.lines(changed, "search")
        assert "index.number_of_shards is 1, configured 2" in line and "index.analysis.analyzer.folded" in line
        assert line.endswith(f"run `cdcsync reindex search --table public.{t}`"), line
        assert f"run `cdcsync reindex search --table {t}`" in caplog.text
        ((first, held),) = es.indices.get_settings(index=alias, flat_settings=True).items()
        assert held["settings"]["index.refresh_interval"] == "2s" and held["settings"]["index.gc_deletes"] == "0s"
        assert held["settings"]["index.number_of_shards"] == "1"
        assert es.indices.get_mapping(index=alias)[first]["mappings"]["properties"]["note"] == {"type": "keyword"}

        reindex(changed, cfg, spark, table=t)
        reindexed = time.time()
        ((second, held),) = es.indices.get_settings(index=alias, flat_settings=True).items()
        assert second == f"{alias}-000002" and held["settings"]["index.number_of_shards"] == "2"
        assert held["settings"]["index.analysis.analyzer.folded.tokenizer"] == "standard"
        assert reindex_needed.lines(changed, "search") == []
        sc.config = changed
        sc.assert_converged("search")
        assert markers(es, alias) == deleted  # the rebuilt index has a marker for each delete still in the log

        purge = MarkerPurge(changed, [cfg])
        assert purge.tick()["search", f"public.{t}"] == 0  # written by the reindex just now: kept
        time.sleep(max(0.0, reindexed + HORIZON_S + 1 - time.time()))
        assert purge.tick()["search", f"public.{t}"] == len(deleted)
        assert markers(es, alias) == set()
        sc.assert_converged("search")  # row 5, re-created after its delete, is there

        # What survives a purge: a replay from before the deletes (a reindex's catch-up, a connector re-emitting)
        # writes each deleted row's older version again, then its delete: the store ends equal to its source.
        # One record a batch, in log order, so that no batch keeps only a key's newest change.
        time.sleep(1.5)  # past gc_deletes
        es.indices.refresh(index=alias)
        follower = build_follower(changed, cfg, spark)
        marks = engine.capture(changed, sorted(follower.mappings))
        starts, ends = {tp: low for tp, (low, _) in marks.items()}, {tp: high for tp, (_, high) in marks.items()}
        reader = engine.consumer(changed, "replay-after-purge")
        applied = 0
        try:
            window = engine.read_window(reader, starts, ends)
            for batch, record in enumerate(record for records in window for record in records):
                applied += follower.process(batch, [record]).applied
        finally:
            reader.close()
        follower.sink.make_visible(sorted({m.target for m in follower.mappings.values()}))
        follower.sink.close()
        assert applied == 2 * len(deleted)  # each deleted row brought back by its older write, then deleted again
        sc.assert_converged("search")
        assert markers(es, alias) == deleted
