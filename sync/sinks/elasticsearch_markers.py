"""The Elasticsearch sink's delete markers: when each was written, and their purge once no replay can need them.

A delete is indexed as a marker ``{cdcsync_deleted: true, cdcsync_version: v, cdcsync_deleted_at: t}`` at the
delete's version ``v``: Elasticsearch forgets a real delete's version after ``index.gc_deletes`` (60 s), and a
write older than the delete arriving later would bring the row back. ``t`` is when the marker was first written
(epoch milliseconds, the writer's clock); the delete redelivered is refused (same version), so ``t`` stays.

**Why a marker can go after the compaction horizon** (``SourceConfig.compaction_horizon_s``, ``H``). A write older
than the delete of key K comes from a record before the delete's ``op=d`` record in K's partition (one key's
changes keep their commit order there). Every writer reads the log forward from a position:

- the follower's stream, from its checkpoint. A position whose next record is older than ``H`` (less a margin)
  is refused (``sync.position``: compaction may have eaten deletes ahead of it; the repair is a reindex, which
  builds a new index). The records before the ``d`` record are no younger than it, and it is no younger than
  ``t``; so once ``t`` is more than ``H`` ago, no follower the daemon runs reads them again;
- any other replay (a reindex's catch-up into the live index, a killed reindex finished, a connector that
  re-emits after a crash) that reads an older write of K reads on past it, to K's ``d`` record, which is still
  in the log whenever the older record is (the cleaner keeps a key's newest record and removes the older ones
  with or before the ``d``): the delete is applied again after the older write, and the index converges. With
  the marker gone, readers may see the row between the two; that is all.

So a marker older than ``H`` is never needed for convergence, and the purge keeps every younger one. The
writer's clock stands for the broker's here: they may differ by far less than the refusal's margin (10 % of
``H``, at most an hour).

**A marker written before its time was kept** (an index of an earlier cdcsync) has no ``t``: the purge stamps
it with the time of the pass, which is later than its real time, so it goes one ``H`` later than it could,
never earlier.

**The purge races no live write.** It finds old markers in a point in time of the indexes behind the alias
(not a staged one, which a publish makes live later) and deletes each with ``version_type=external_gte`` at
the marker's own version. A row written since at a newer version (re-created, or deleted again with a new
marker) makes the delete a version conflict, and it stays; the stamp is conditional the same way. Elasticsearch
keeps the deleted document's version, the marker's, for ``gc_deletes``: a change with any newer version is
taken. ``_delete_by_query`` would do the same search and conditional deletes, but with internal versions: the
deleted document's version becomes the marker's plus one, and a change carrying exactly that version within
``gc_deletes`` would be refused as older and lost. The local stack's distribution does not have it either
(docs/local-stack.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import suppress
from typing import Any

from elasticsearch import ApiError, Elasticsearch

from cdcsync.errors import RetryableError
from cdcsync.sync.sink import Purged

DELETED_FIELD = "cdcsync_deleted"
DELETED_AT_FIELD = "cdcsync_deleted_at"
DELETED_AT_MAPPING: dict[str, Any] = {"type": "date", "format": "epoch_millis"}
PAGE = 1000
ANSWER = "items.*.status,items.*.error"
MARKERS = {"term": {DELETED_FIELD: True}}
HIDE_MARKERS = {"bool": {"must_not": {"term": {DELETED_FIELD: True}}}}  # every alias's filter: readers see no marker
UNSTAMPED = {"bool": {"filter": [MARKERS], "must_not": [{"exists": {"field": DELETED_AT_FIELD}}]}}


def purge(client: Elasticsearch, indexes: Sequence[str], horizon_s: float, now: float) -> Purged:
    """Stamp the markers of ``indexes`` that have no time, then delete those written before ``now - horizon_s``."""
    if not indexes:
        return Purged()
    names = ",".join(indexes)
    client.indices.put_mapping(index=names, properties={DELETED_AT_FIELD: DELETED_AT_MAPPING})  # an older index's
    client.indices.refresh(index=names)
    now_ms = int(now * 1000)
    done = Purged()
    for hits in _pages(client, names, UNSTAMPED, source=True):
        operations: list[dict[str, Any]] = []
        for hit in hits:
            operations += [
                {"index": _conditional(hit)},
                {**hit["_source"], DELETED_FIELD: True, DELETED_AT_FIELD: now_ms},
            ]
        applied, changed = _bulk(client, operations, names)
        done += Purged(stamped=applied, changed=changed)
    cutoff_ms = now_ms - int(horizon_s * 1000)
    old = {"bool": {"filter": [MARKERS, {"range": {DELETED_AT_FIELD: {"lt": cutoff_ms}}}]}}
    for hits in _pages(client, names, old, source=False):
        applied, changed = _bulk(client, [{"delete": _conditional(hit)} for hit in hits], names)
        done += Purged(purged=applied, changed=changed)
    return done


def _conditional(hit: dict[str, Any]) -> dict[str, Any]:
    """A bulk action on the document ``hit`` found, taken only if it still has that version (or an older one)."""
    return {"_index": hit["_index"], "_id": hit["_id"], "version": hit["_version"], "version_type": "external_gte"}


def _pages(client: Elasticsearch, names: str, query: dict[str, Any], source: bool) -> Iterator[list[dict[str, Any]]]:
    """The documents matching ``query`` at one point in time, a page at a time, with their versions."""
    pit_id = client.open_point_in_time(index=names, keep_alive="2m")["id"]
    search_after: list[Any] | None = None
    try:
        while True:
            page = client.search(
                pit={"id": pit_id, "keep_alive": "2m"},
                query=query,
                sort=[{"_shard_doc": "asc"}],
                size=PAGE,
                version=True,
                source=source,
                track_total_hits=False,
                search_after=search_after,
            )
            pit_id, hits = page["pit_id"], page["hits"]["hits"]
            if hits:
                yield hits
            if len(hits) < PAGE:
                return
            search_after = hits[-1]["sort"]
    finally:
        with suppress(ApiError):  # it expires by itself after its keep_alive
            client.close_point_in_time(id=pit_id)


def _bulk(client: Elasticsearch, operations: list[dict[str, Any]], names: str) -> tuple[int, int]:
    """Send conditional actions; (applied, changed since: a version conflict or already gone)."""
    answer = client.bulk(operations=operations, filter_path=ANSWER)
    applied = changed = 0
    failed: list[str] = []
    for item in answer.get("items", []):
        outcome = next(iter(item.values()))
        if outcome["status"] < 300:
            applied += 1
        elif outcome["status"] in (404, 409):
            changed += 1
        else:
            failed.append(f"{outcome['status']} {outcome.get('error', {}).get('type')}")
    if failed:
        raise RetryableError(f"purging delete markers of {names}: {len(failed)} actions failed ({failed[:3]})")
    return applied, changed
