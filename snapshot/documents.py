"""Reindex and repair a document follower from its mirror: its documents rebuilt, a generation or a few at a time.

**Reindex**: every document written from the mirror into a new generation, then published.

A document follower's state is its mirror (``sync.documents.mirror``), which
holds every row of its tables; the documents are a function of it. So its
reindex reads no log and no source: it builds each live root's document from
the mirror into a staged generation of the document's target (a new
Elasticsearch index behind the alias, a Redis key generation), publishes it,
and writes again the roots the daemon wrote meanwhile.

While it runs the daemon keeps following, and writes the live generation:

1. note the mirror's write counter **S0** (``Mirror.seq``);
2. stage a new generation of each target; fill it with every live root's
   document, a page at a time, each page read in one read transaction of the
   mirror (one state of it), at the version the live store holds for that
   root, whatever the daemon writes next being above it; a root not written
   yet is left to the daemon, which has it to write;
3. publish: readers switch to the new generation, the old one is dropped;
4. rebuild the roots recorded as written after S0 and write them to the live
   (new) generation at the version last written: a root the daemon wrote into
   the old generation after step 2 filled it. The daemon records a page's versions and counter before
   it writes the page, so a write that landed in the old generation is one
   this step finds.

Use it after a change of a document's mapping that the index cannot take in
place (an array made ``nested``), or when ``verify`` finds documents the store
lost or holds wrong while the mirror is right. Documents stay visible
throughout, in the old generation until the switch.

**Repair** (``repair_documents``): the documents a verify found missing,
stale or extra, each rebuilt from the mirror and written to the live store
with a version above the one last written and the one the store holds, a
page at a time inside a write
transaction of the mirror, so the daemon records no page meanwhile and its
next write of those roots is above the repair's. What the mirror itself holds
wrong (it disagrees with the source) no rewrite fixes: the verify after the
repair still lists those documents.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import ConfigError, FatalError
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.documents.build import mirror_path, trees
from cdcsync.sync.documents.engine import Built, Documents, fingerprint, specs
from cdcsync.sync.documents.follower import document_mapping, document_row
from cdcsync.sync.documents.mirror import Mirror
from cdcsync.sync.documents.tree import unit
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.verify.report import TableReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PAGE = 500
Progress = Callable[[int, int, float], None]  # (documents done, documents in all, seconds)


@dataclass
class DocumentReindex:
    """What a document reindex did, per document."""

    follower: str
    written: dict[str, int] = field(default_factory=dict)  # document -> documents in the new generation
    caught_up: dict[str, int] = field(default_factory=dict)  # document -> roots written again after the switch
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"follower": self.follower, "written": self.written, "caught_up": self.caught_up,
                "seconds": self.seconds}  # fmt: skip


def reindex_documents(
    config: Config,
    follower: FollowerConfig,
    spark: SparkSession | None,
    only: str | None = None,
    progress: Progress | None = None,
) -> DocumentReindex:
    assert follower.documents is not None
    if only is not None and only not in follower.documents:
        raise ConfigError(
            [f"follower {follower.name} keeps no document {only}; it keeps: {', '.join(follower.documents)}"]
        )
    path = mirror_path(config, follower)
    if not path.exists():
        raise FatalError(
            f"follower {follower.name}: no mirror at {path}: it has not run yet; `cdcsync run {follower.name}` fills "
            "its documents from the topics"
        )
    every = trees(config, follower, mappings_for(config, follower))
    chosen = [t for t in every if only in (None, t.name)]
    mirror = Mirror(path, specs(every), {t.name: (t.root.table, fingerprint(t)) for t in every})
    documents = Documents(every, mirror)
    sink = build_sink(config, follower, spark)
    summary = DocumentReindex(follower.name)
    started = time.monotonic()
    try:
        since = mirror.seq()  # 1
        sink.stage([document_mapping(t) for t in chosen])  # 2
        total = sum(mirror.count_live(t.root.table) for t in chosen)
        done = 0
        for tree in chosen:
            after, count = "", 0
            while True:
                with mirror.reading():
                    page = mirror.roots(tree.name, after, PAGE)
                    built = []
                    for key, version in page:
                        if version < 0:  # not written yet: the daemon writes it (it is dirty), not this fill
                            continue
                        doc, _newest, _nested = documents.build(tree, key)
                        if doc is not None:  # at the version the live store holds: the daemon's next is above
                            built.append(Built(key, version, doc, 0))
                if not page:
                    break
                after = page[-1][0]
                result = sink.write(0, [document_row(tree, b, sink) for b in built])
                if result.rejected:
                    raise FatalError(
                        f"follower {follower.name}: the new generation of {tree.target} refused "
                        f"{len(result.rejected)} document(s), e.g. {result.rejected[0][0].doc_id}: "
                        f"{result.rejected[0][1]}; nothing was switched"
                    )
                count += len(built)
                done += len(page)
                if progress is not None:
                    progress(done, total, time.monotonic() - started)
            summary.written[tree.name] = count
        sink.publish()  # 3
        for tree in chosen:  # 4
            again = mirror.written_since(tree.name, since)
            for at in range(0, len(again), PAGE):
                with mirror.reading():
                    rows = []
                    for key in again[at : at + PAGE]:
                        doc, _newest, _nested = documents.build(tree, key)
                        version = mirror.version_written(tree.name, key)  # as the daemon wrote it, or the fill
                        rows.append(document_row(tree, Built(key, version, doc, 0), sink))
                sink.write(0, rows)
            sink.make_visible([tree.target])
            summary.caught_up[tree.name] = len(again)
    finally:
        sink.close()
        mirror.close()
    summary.seconds = round(time.monotonic() - started, 1)
    return summary


def repaired(done: dict[str, dict[str, int]]) -> list[str]:
    """A line per document of what ``repair_documents`` did."""
    return [f"{unit(name)}: {c['written']} rewritten from the mirror, {c['older']} refused as older"
            for name, c in done.items()]  # fmt: skip


def repair_documents(
    config: Config, follower: FollowerConfig, spark: SparkSession | None, reports: list[TableReport]
) -> dict[str, dict[str, int]]:
    """Rewrite from the mirror each document the reports list; per document: written, and older (refused)."""
    assert follower.documents is not None
    path = mirror_path(config, follower)
    if not path.exists():
        raise FatalError(f"follower {follower.name}: no mirror at {path}: run `cdcsync run {follower.name}` first")
    every = trees(config, follower, mappings_for(config, follower))
    by_unit = {unit(t.name): t for t in every}
    mirror = Mirror(path, specs(every), {t.name: (t.root.table, fingerprint(t)) for t in every})
    documents = Documents(every, mirror)
    sink = build_sink(config, follower, spark)
    done: dict[str, dict[str, int]] = {}
    try:
        sink.open([document_mapping(t) for t in every])
        for report in reports:
            tree = by_unit.get(report.table)
            if tree is None:
                continue
            ids = sorted({*report.missing, *report.stale, *report.extra})
            counts = done.setdefault(tree.name, {"written": 0, "older": 0})
            for at in range(0, len(ids), PAGE):
                page = ids[at : at + PAGE]
                held = {key: version for key, version, _doc in sink.lookup(tree.target, page)}
                mirror.begin()  # the daemon records no page of its own until this one is written
                try:
                    built = []
                    for key in page:
                        doc, newest, _nested = documents.build(tree, key)
                        # above what the store holds too: a document changed outside cdcsync has a version of its own
                        above = max(mirror.version_written(tree.name, key), held.get(key, -1)) + 1
                        built.append(Built(key, max(above, newest), doc, 0))
                    mirror.record(tree.name, {b.key: b.version for b in built})
                    result = sink.write(0, [document_row(tree, b, sink) for b in built])
                    mirror.commit()
                except BaseException:
                    mirror.rollback()
                    raise
                counts["written"] += result.applied
                counts["older"] += result.older + len(result.rejected)
            sink.make_visible([tree.target])
    finally:
        sink.close()
        mirror.close()
    return done
