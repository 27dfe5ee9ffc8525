"""The Elasticsearch sink's write path: rows as ``_bulk`` ``index`` actions in bounded requests, each answer counted.

A row is one ``index`` action at its version with ``version_type=external`` (the apply rule, in
``sinks/elasticsearch.py``'s docstring). Its source is the document in stored form (``stored_form``) with
``cdcsync_version`` and ``cdcsync_deleted``; a delete's is a marker (``elasticsearch_markers``). A row that cannot
be sent (no JSON form, a reserved field) is rejected before any request; an id past Elasticsearch's 512 bytes is
stored under a digest of it (``elasticsearch_fields.stored_id``). A request
holds at most ``CHUNK_ROWS`` rows and ``CHUNK_BYTES``; one the server finds too large (413) is split in halves,
down to a lone document, which is rejected. Each item's answer is taken as ``elasticsearch_errors.classify_item``
says; one not about its row stops the batch with the error the sink makes of it (``Refused``). A dropped column
leaves every document the same way, written back without its fields (``drop_fields``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson
from elasticsearch import Elasticsearch

from cdcsync.errors import Errors, RetryableError
from cdcsync.sync.mapping import Row, scalar_text
from cdcsync.sync.sink import WriteResult
from cdcsync.sync.sinks.elasticsearch_errors import TooLarge, classify_item, reason
from cdcsync.sync.sinks.elasticsearch_fields import KEY_FIELD, OWN_FIELDS, VERSION_FIELD, stored_id
from cdcsync.sync.sinks.elasticsearch_markers import DELETED_AT_FIELD, DELETED_FIELD
from cdcsync.sync.sinks.elasticsearch_reads import PAGE

CHUNK_ROWS = 1000
CHUNK_BYTES = 8 * 1024 * 1024  # far below http.max_content_length (100 MB): bounded memory on both ends
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# What send reads of a bulk answer: per item its status and error. The whole answer is ~200 bytes per
# document (index, id, version, shards, seq_no ...), which Elasticsearch writes and the client parses.
BULK_ANSWER = "items.*.status,items.*.error"

Chunk = list[tuple[Row, bytes, bytes]]  # rows with their action and source lines
Where = Callable[[str], tuple[str, bool]]  # target -> (the index its rows go to, whether it must be an alias)
Refused = Callable[[str, int, dict[str, Any], str], Exception]  # (kind, status, error, target) -> what stops the batch


def write(client: Elasticsearch, rows: list[Row], where: Where, errors: Errors, refused: Refused) -> WriteResult:
    """Apply a batch of last-per-key rows in bulk requests of at most CHUNK_ROWS rows / CHUNK_BYTES."""
    result = WriteResult()
    chunk: Chunk = []
    size = 0
    marked_at = int(time.time() * 1000)  # a delete marker's time: the purge keeps it a compaction horizon
    for row in rows:
        try:
            action, source = encode(row, marked_at, *where(row.target))
        except (TypeError, ValueError) as err:  # NaN, a lone surrogate, a reserved field name
            result.rejected.append((row, f"cannot be sent to elasticsearch: {err}"))
            continue
        if chunk and (len(chunk) >= CHUNK_ROWS or size + len(action) + len(source) > CHUNK_BYTES):
            result = result.merge(send(client, chunk, errors, refused))
            chunk, size = [], 0
        chunk.append((row, action, source))
        size += len(action) + len(source)
    if chunk:
        result = result.merge(send(client, chunk, errors, refused))
    return result


def encode(row: Row, marked_at: int, index: str, require_alias: bool) -> tuple[bytes, bytes]:
    """The row's action and source lines: written to ``index``, refused unless it is an alias if ``require_alias``."""
    # require_alias: if the alias vanished, fail instead of auto-creating an unmapped index.
    # A staged index is written by its concrete name; it exists, stage() created it.
    ident = {"_index": index, "_id": stored_id(row.doc_id), "require_alias": require_alias}
    action = {"index": {**ident, "version": row.version, "version_type": "external"}}
    if row.doc is None:
        source: dict[str, Any] = {DELETED_FIELD: True, VERSION_FIELD: row.version, DELETED_AT_FIELD: marked_at}
    else:
        source = stored_form(row.doc)
        if any(field in source for field in OWN_FIELDS):
            raise ValueError(f"fields {', '.join(OWN_FIELDS)} are reserved for cdcsync")
        if any(isinstance(v, float) and not math.isfinite(v) for v in source.values()):
            raise ValueError("NaN and Infinity have no JSON form")  # orjson would write null
        source[VERSION_FIELD], source[DELETED_FIELD] = row.version, False
    if ident["_id"] is not row.doc_id:  # a long id, stored under its digest: the document keeps it whole
        source[KEY_FIELD] = row.doc_id
    # orjson: a tenth of json's time per document; a lone surrogate raises (TypeError), as it should.
    return orjson.dumps(action), orjson.dumps(source)


def send(client: Elasticsearch, chunk: Chunk, errors: Errors, refused: Refused) -> WriteResult:
    """One bulk request of the chunk (halves of it while the server finds it too large), its items counted."""
    lines = [line for _row, action, source in chunk for line in (action, source)]
    try:
        # The client passes pre-encoded NDJSON lines through; its type hint only knows dicts.
        with errors("bulk"):
            response = client.bulk(operations=cast(Any, lines), filter_path=BULK_ANSWER)
    except TooLarge:
        if len(chunk) == 1:
            return WriteResult(rejected=[(chunk[0][0], "request entity too large (http.max_content_length)")])
        half = len(chunk) // 2
        return send(client, chunk[:half], errors, refused).merge(send(client, chunk[half:], errors, refused))
    result = WriteResult()
    for (row, _action, _source), item in zip(chunk, response["items"], strict=True):
        outcome = item["index"]
        error, status = outcome.get("error"), outcome["status"]
        kind = classify_item(status, error)
        if kind == "applied":
            result.applied += 1
        elif kind == "older":  # the store holds this version or a newer one
            result.older += 1
        elif kind == "reject":
            result.rejected.append((row, reason(error or {})))
        else:
            raise refused(kind, status, error or {}, row.target)
    return result


def drop_fields(client: Elasticsearch, index: str, fields: Sequence[str], errors: Errors) -> int:
    """Remove ``fields`` from every document of ``index`` (DROP COLUMN), at the version each one has; how many.

    Rounds of a search for documents still holding one of the fields, each
    written back without them with ``version_type=external_gte`` and its
    own version: the apply rule's order is untouched, and a document
    changed meanwhile (a higher version) is left to that change. The
    mapping keeps the fields (Elasticsearch cannot remove one); no
    document has them.
    """
    holding = {"bool": {"should": [{"exists": {"field": f}} for f in fields], "minimum_should_match": 1}}
    removed = 0
    while True:
        with errors(f"refresh {index}"):
            client.indices.refresh(index=index)
        with errors(f"search {index}"):
            found = client.search(index=index, query=holding, size=PAGE, version=True)
        hits = found["hits"]["hits"]
        if not hits:
            break
        operations: list[dict[str, Any]] = []
        for hit in hits:
            doc = {k: v for k, v in hit["_source"].items() if k not in fields}
            operations += [
                {"index": {"_index": hit["_index"], "_id": hit["_id"], "version": hit["_version"],
                           "version_type": "external_gte"}},
                doc,
            ]  # fmt: skip
        with errors(f"bulk {index}"):
            answer = client.bulk(operations=operations, filter_path=BULK_ANSWER)
        statuses = [next(iter(item.values()))["status"] for item in answer.get("items", [])]
        done = sum(1 for s in statuses if s < 300)
        failed = [s for s in statuses if s >= 300 and s != 409]
        if failed or not done:
            raise RetryableError(f"index {index}: removing fields {list(fields)} failed (statuses {failed[:5]})")
        removed += done
    return removed


def stored_form(doc: dict[str, Any]) -> dict[str, Any]:
    """The canonical document as JSON, as ``_source`` stores and returns it."""
    return {field: _json_safe(value) for field, value in doc.items()}


_PLAIN = frozenset({str, int, float, bool})


def _json_safe(value: Any) -> Any:
    if value is None or type(value) in _PLAIN:  # most columns: nothing to convert
        return NON_FINITE[str(value)] if type(value) is float and not math.isfinite(value) else value
    text = scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
