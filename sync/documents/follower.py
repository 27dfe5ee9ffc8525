"""A follower that keeps documents: a batch's changes go to the mirror, then its dirty roots' documents to the sink.

Per batch, in this order (what makes a crash safe, as for rows: ``sync.follower``):

1. parse and map each record, keep the last change per key in each chunk,
   dead-letter what cannot be parsed (``Follower._mapped_chunks``, shared);
2. in one transaction: apply each change to the mirror under the version rule,
   and mark the roots it touches dirty (``sync.documents.engine``); commit;
3. rebuild the dirty roots' documents, a page at a time: record the page's
   versions and the mirror's write counter (what a reindex running meanwhile
   reads, ``cdcsync.snapshot.documents``), write them under the apply rule,
   and take the page off the dirty list; a document the store refuses, or one
   past the nested objects' limit, goes to the dead-letter topic with the
   reason; a root never written whose row is not there is left alone;
4. return, and only then does Spark record the batch's offsets.

A crash after 2 leaves the roots dirty; the replayed batch applies nothing
(each change is already there) and writes them. The counts add up over
records as a row follower's do (``applied``: changes the mirror took);
documents written and refused are logged per batch.
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from cdcsync import metrics
from cdcsync.events import Change, Record
from cdcsync.sync import deadline
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.documents.engine import NESTED_LIMIT, Built, Documents, fingerprint, specs
from cdcsync.sync.documents.mirror import Mirror
from cdcsync.sync.documents.tree import Node, Tree
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import Row, TableMapping, scalar_text
from cdcsync.sync.sink import Sink

log = logging.getLogger("cdcsync.documents")

PAGE = 500  # dirty roots rebuilt and written at a time: a fan-out to a million roots is written in pages


class DocumentFollower(Follower):
    """A ``Follower`` whose tables feed documents (``trees``) instead of one target each."""

    on_driver = True  # the mirror is a file on the driver: batches are read there (sync.stream)

    def __init__(
        self,
        name: str,
        sink: Sink,
        mappings: Mapping[str, TableMapping],
        dead_letters: DeadLetters,
        trees: Iterable[Tree],
        mirror_path: Path,
        max_attempts: int = 8,
        chunk_bytes: int | None = None,
        nested_limit: int = NESTED_LIMIT,
        filling: bool = False,
    ) -> None:
        super().__init__(name, sink, mappings, dead_letters, max_attempts=max_attempts, writers=1,
                         chunk_bytes=chunk_bytes)  # fmt: skip
        self.trees = list(trees)
        documents = {t.name: (t.root.table, fingerprint(t)) for t in self.trees}
        self.mirror = Mirror(mirror_path, specs(self.trees), documents)
        self.mirror_path = mirror_path
        self.documents = Documents(self.trees, self.mirror)
        self.nested_limit = nested_limit
        self.filling = filling  # a bootstrap's fill: documents are written once, at its end (``filled``)
        self._specs, self._documents = specs(self.trees), documents

    def process(self, batch_id: int, records: Iterable[Record]) -> BatchCounts:
        started = time.monotonic()
        counts = BatchCounts()
        self.lacked.clear()
        self.failed.clear()
        committed = array("q")  # each applied change's commit time: its freshness ends when its documents are written
        self.mirror.begin()
        try:
            for rows, _ in self._mapped_chunks(records, counts):
                done, older = self.documents.apply(rows, walk=not self.filling)
                counts.applied += len(done)
                counts.older += older
                for row in done:  # counted now: a batch's rows are not held until its documents are written
                    change = row.change
                    counts.applied_by_op[change.op] = counts.applied_by_op.get(change.op, 0) + 1
                    if change.commit_ts_ms:
                        committed.append(change.commit_ts_ms)
                        newest = counts.newest_commit_ms.get(change.table, 0)
                        counts.newest_commit_ms[change.table] = max(change.commit_ts_ms, newest)
                deadline.progress(self.name)
            self.mirror.commit()
        except BaseException:
            self.mirror.rollback()
            raise
        written, refused = (0, 0) if self.filling else self.write_dirty(batch_id, counts)
        now_ms = time.time() * 1000
        counts.lags_s.extend(max(now_ms - ts, 0) / 1000 for ts in committed)
        if written or refused:
            log.info("follower=%s batch=%d documents_written=%d documents_refused=%d", self.name, batch_id,
                     written, refused)  # fmt: skip
        return self._finish(batch_id, counts, started)

    def fresh(self) -> None:
        """An empty mirror: a bootstrap builds it from the start of the topics."""
        self.mirror.close()
        for path in self.mirror_path.parent.glob(self.mirror_path.name + "*"):  # the file, its WAL and index
            path.unlink()
        self.mirror = Mirror(self.mirror_path, self._specs, self._documents)
        self.documents = Documents(self.trees, self.mirror)

    def filled(self) -> None:
        """Every document of the mirror the fill built, written once into the staged generations."""
        for tree in self.trees:
            self.mirror.dirty_all(tree.name)
        counts = BatchCounts()
        written, refused = self.write_dirty(0, counts)
        self.dead_letters.flush()
        log.info("follower=%s filled documents_written=%d documents_refused=%d", self.name, written, refused)

    def write_dirty(self, batch_id: int, counts: BatchCounts) -> tuple[int, int]:
        """Write every dirty root's document, a page at a time; (documents written, refused)."""
        written = refused = 0
        for tree in self.trees:
            while True:
                page = self.documents.rebuilt(tree, PAGE)
                if not page:
                    break
                rows: list[Row] = []
                for built in page:
                    if built.doc is None and built.written < 0:  # a root never written, with no row: nothing to delete
                        continue
                    if built.nested > self.nested_limit:
                        refused += 1
                        self._refuse(tree, built, f"document {tree.name} {built.key!r} holds {built.nested} nested "
                                     f"objects, past the limit of {self.nested_limit} (Elasticsearch's "
                                     "index.mapping.nested_objects.limit): not written; map the largest array as "
                                     "object (nested: false), or raise the limit on the index and here")  # fmt: skip
                        continue
                    rows.append(document_row(tree, built, self.sink))
                self.mirror.writing(tree.name, {b.key: b.version for b in page})
                result = self._write(batch_id, rows, counts) if rows else None
                if result is not None:
                    written += result.applied + result.older
                    for row, reason in result.rejected:
                        refused += 1
                        self._refuse(tree, Built(row.doc_id, row.version, row.doc, 0, -1), reason)
                self.mirror.written(tree.name, [b.key for b in page])
                deadline.progress(self.name)
        return written, refused

    def _refuse(self, tree: Tree, built: Built, reason: str) -> None:
        log.error("follower=%s document=%s key=%s refused: %s", self.name, tree.name, built.key, reason)
        value = orjson.dumps({"document": tree.name, "after": built.doc}, default=str)
        record = Record(tree.root.topic, -1, -1, orjson.dumps({"id": built.key}), value)
        self.dead_letters.send(record, "document", reason)
        metrics.DEAD.labels(self.name).inc()

    def make_visible(self, counts: BatchCounts) -> None:
        self.sink.make_visible([tree.target for tree in self.trees])

    def targets(self) -> list[TableMapping]:
        """A ``TableMapping`` per document, as the sink opens its target (``sync.documents.build``)."""
        return [document_mapping(tree) for tree in self.trees]


DOCUMENT_FIELD = "doc"  # the field of a store without objects (Redis) that holds a document's JSON


def stored(sink: Sink, doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """A document as ``sink`` takes it: as it is where fields may be objects, else ``{"doc": its JSON text}``."""
    if doc is None or sink.holds_objects:
        return doc
    return {DOCUMENT_FIELD: document_json(doc)}


def document_json(doc: dict[str, Any]) -> str:
    """A document's JSON text, keys sorted, each value in the text a store keeps of it (``scalar_text``)."""
    return orjson.dumps(_plain(doc), option=orjson.OPT_SORT_KEYS).decode()


def _plain(value: Any) -> Any:
    if value is None or type(value) in (str, int, bool):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    text = scalar_text(value)
    return text if text is not None else str(value)


def document_row(tree: Tree, built: Built, sink: Sink) -> Row:
    """A rebuilt document as the row ``sink`` writes: its root's id, the document's version, None for a delete."""
    doc = stored(sink, built.doc)
    change = Change(
        source="",
        table=tree.root.table,
        op="d" if built.doc is None else "u",
        key={},
        after=doc,
        commit_ts_ms=None,
        version=built.version,
        topic=tree.root.topic,
        partition=-1,
        offset=-1,
    )
    return Row(change, tree.target, built.key, doc)


def document_mapping(tree: Tree) -> TableMapping:
    """The sink's view of a document's target: its top-level fields, untyped, and the nested fields declared."""
    return TableMapping(
        table=tree.root.table,
        target=tree.target,
        key_columns=tree.root.key,
        include=(),
        field_mappings=_properties(tree.root),
    )


def _properties(node: Node) -> dict[str, object]:
    """Elasticsearch's explicit mappings for the nested arrays under ``node``, at every level."""
    props: dict[str, object] = {}
    for child in node.children:
        inner = _properties(child)
        if child.nested:
            props[child.field] = {"type": "nested", **({"properties": inner} if inner else {})}
        elif inner:
            props[child.field] = {"properties": inner}
    return props
