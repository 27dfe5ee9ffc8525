"""The Elasticsearch sink's reads: every live document of an index (``scan``), the live ones of some ids (``lookup``).

What ``verify`` and ``repair`` compare with the source: each document as ``(id, version, doc)``, ``doc``
without ``cdcsync_version`` and ``cdcsync_deleted``. Delete markers are never returned: ``scan`` searches
with the alias filter (``HIDE_MARKERS``), ``lookup`` skips them (a get by id ignores the alias filter).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from contextlib import suppress
from typing import Any

import orjson
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout
from elasticsearch import ApiError, Elasticsearch

from cdcsync.errors import Errors
from cdcsync.sync.sink import batched
from cdcsync.sync.sinks.elasticsearch_fields import KEY_FIELD, VERSION_FIELD, stored_id
from cdcsync.sync.sinks.elasticsearch_markers import DELETED_FIELD, HIDE_MARKERS

HIDDEN = (VERSION_FIELD, DELETED_FIELD, KEY_FIELD)  # cdcsync's own fields, left out of what a read returns

PAGE = 1000
SCAN_BYTES = 8 * 1024 * 1024  # a scan page's documents, about, past its first
SCAN_PAGES = (100, 5000)  # the fewest and the most documents of a scan page past its first
# What a scan reads of a page: each hit's _index and _score left out are a quarter of the JSON to decode.
SLICES = 2  # searches of a large index's scan at once, each over a slice of it (``_at_once``)
SLICED_DOCS = 200_000  # fewer documents: one search at a time
SCAN_ANSWER = ["pit_id", "hits.hits._id", "hits.hits._version", "hits.hits._source", "hits.hits.sort"]


def scan(client: Elasticsearch, index: str, staged: bool, errors: Errors) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Every live document of ``index`` (an alias, or a ``staged`` index) at one point in time, a page at a time.

    The first page is ``PAGE`` documents; the next ones hold about ``SCAN_BYTES`` of JSON by the first
    page's documents' size, within ``SCAN_PAGES``: a million narrow documents read 2x faster in pages of
    5,000 than of 1,000, and a page of 5,000 wide ones (60 KB) would be 300 MB. An index of
    ``SLICED_DOCS`` documents or more is read in ``SLICES`` slices at once (``_at_once``).
    """
    if staged:
        with errors("check index"):
            exists = client.indices.exists(index=index)
    else:
        with errors("check alias"):
            exists = client.indices.exists_alias(name=index)
    if not exists:
        return
    with errors("refresh"):
        client.indices.refresh(index=index)
    with errors("open point in time"):
        pit = [client.open_point_in_time(index=index, keep_alive="2m")["id"]]  # the id each answer gives
    try:
        with errors("count"):
            docs = client.count(index=index, query=HIDE_MARKERS)["count"]
        ways = SLICES if docs >= SLICED_DOCS else 1
        if ways == 1:
            pages = _pages(client, pit, None, errors)
        else:
            pages = _at_once([_pages(client, pit, {"id": n, "max": ways}, errors) for n in range(ways)])
        for hits in pages:
            for hit in hits:
                yield _read(hit, hit["_source"])
    finally:
        # Best effort: an unclosed point in time expires by itself after its keep_alive.
        with suppress(ApiError, TransportConnectionError, ConnectionTimeout):
            client.close_point_in_time(id=pit[0])


def _pages(
    client: Elasticsearch, pit: list[str], part: dict[str, int] | None, errors: Errors
) -> Iterator[list[dict[str, Any]]]:
    """The hits of the point in time ``pit[0]`` (of ``part``, a slice, if given), a page at a time."""
    search_after: list[Any] | None = None
    size = PAGE
    while True:
        with errors("search"):
            page = client.search(
                pit={"id": pit[0], "keep_alive": "2m"},
                query=HIDE_MARKERS,  # the point in time keeps the alias filter; this says it once more
                sort=[{"_shard_doc": "asc"}],
                size=size,
                version=True,
                track_total_hits=False,
                search_after=search_after,
                filter_path=SCAN_ANSWER,
                slice=part,  # None: the whole index
            )
        pit[0], hits = page["pit_id"], page.get("hits", {}).get("hits", [])  # a page of none has no "hits"
        yield hits
        if len(hits) < size:
            return
        if search_after is None:  # sized by the first page's documents
            each = max(1, sum(len(orjson.dumps(hit["_source"])) for hit in hits) // len(hits))
            size = min(max(SCAN_BYTES // each, SCAN_PAGES[0]), SCAN_PAGES[1])
        search_after = hits[-1]["sort"]


def _at_once(parts: list[Iterator[list[dict[str, Any]]]]) -> Iterator[list[dict[str, Any]]]:
    """The pages of every part, each part read on a thread of its own, as they come; at most a page per
    part waits to be taken. A part's error is raised here; closing this ends every part's thread.

    Why: one search at a time kept Elasticsearch on one of its threads (~60 % of a core at ten million
    documents) and the verify waiting for each page; the slices' searches run at once on the server.
    """
    pages: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=len(parts))
    stop = threading.Event()

    def read(part: Iterator[list[dict[str, Any]]]) -> None:
        try:
            for hits in part:
                while not stop.is_set():
                    try:
                        pages.put(("page", hits), timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            pages.put(("done", None))
        except BaseException as err:  # the caller raises it
            pages.put(("error", err))

    threads = [threading.Thread(target=read, args=(p,), name="cdcsync-scan-slice", daemon=True) for p in parts]
    for thread in threads:
        thread.start()
    running = len(threads)
    try:
        while running:
            kind, value = pages.get()
            if kind == "page":
                yield value
            elif kind == "done":
                running -= 1
            else:
                raise value
    finally:
        stop.set()
        for thread in threads:
            while thread.is_alive():  # one may wait to put its last word: take it
                with suppress(queue.Empty):
                    pages.get(timeout=0.1)
                thread.join(0.1)


def lookup(
    client: Elasticsearch, index: str, ids: Iterable[str], errors: Errors
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """The live documents of these ids in ``index`` (real-time gets, ``PAGE`` ids a request)."""
    for chunk in batched(ids, PAGE):
        with errors("get documents"):
            found = client.mget(index=index, ids=[stored_id(i) for i in chunk], realtime=True)["docs"]
        for hit in found:
            source = hit.get("_source")
            if not hit.get("found") or source is None or source.get(DELETED_FIELD):
                continue
            yield _read(hit, source)


def _read(hit: dict[str, Any], source: dict[str, Any]) -> tuple[str, int, dict[str, Any]]:
    """A hit as ``(id, version, doc)``: the row's id (kept whole in ``KEY_FIELD`` when longer than an ``_id``
    takes), without cdcsync's own fields."""
    doc = {k: v for k, v in source.items() if k not in HIDDEN}
    return source.get(KEY_FIELD, hit["_id"]), hit["_version"], doc
