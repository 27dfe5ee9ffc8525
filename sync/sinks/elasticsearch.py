"""Elasticsearch sink: bulk ``index`` actions with external versions, behind a filtered alias.

Layout per target ``T`` (``P`` is the sink's ``index_prefix``):

- a generation, the index ``PT-000001`` with the target's index settings (the
  follower's ``index:`` and its table's; 1 shard and 0 replicas unless set:
  ``elasticsearch_index``) mapped explicitly for the columns whose type the
  mapping knows (or as ``index.mappings`` says), dynamically for the rest,
  plus ``cdcsync_version`` (long), ``cdcsync_deleted`` (boolean) and
  ``cdcsync_deleted_at`` (date);
- an alias ``PT``, its write index, filtered to hide delete markers. Writes and
  readers use the alias, so a reindex can build ``-000002`` and swap it atomically.

Generations (``stage``/``publish``): ``stage`` deletes every ``PT-NNNNNN``
the alias does not point to (an earlier stage never published) and creates
the next number, with the settings and mappings configured now, without the
alias: readers cannot see it, and this sink instance writes and reads it by its concrete
name. Nobody searches it, so it is filled the way a bulk load is: with
``refresh_interval: -1`` (no refresh, no segment per second to merge later).
``publish`` puts the index's own ``refresh_interval`` back and reads it back
(a staged index left without refreshes is refused), refreshes it (so the
first search after the switch sees all of it), then moves the alias, filter and write flag included, in ONE
``_aliases`` request for every staged target: a reader resolves an alias to the old index or to the
new one, never to none or both, and sees all targets switch together. After ``DROP_GRACE_S`` (requests
that resolved an alias just before the swap finish on the old index), waited once per publish and not
once per target (``python -m bench.publish``), the old indexes are deleted. A new follower has no
alias until its first publish.

Guarantees (``cdcsync.sync.sink``):

- **Apply rule**: every change is an ``index`` action with
  ``version_type=external``; Elasticsearch itself refuses (409) a version
  lower than or equal to the stored one, counted as ``older``.
- **Deletes are marker documents**, ``{cdcsync_deleted: true,
  cdcsync_version: v, cdcsync_deleted_at: t}`` indexed with the delete's
  version, not ES deletes: ES forgets a deleted document's version after
  ``index.gc_deletes`` (60 s) and a replayed older write would then resurrect
  the row. A marker keeps its version until it is older than the source's
  compaction horizon; then the daemon purges it (``purge_markers``;
  ``elasticsearch_markers`` says why no replay can need it any more). A
  reindex, built from a bootstrap, drops them. The alias filter hides markers
  from search, count and point in time; it does **not** apply to GET/mget by
  id, so a reader fetching by id must check ``cdcsync_deleted``.
- **Errors** (``elasticsearch_errors.classify_item``; the sink contract's rule: only an error
  about that one document rejects it, every other one stops the batch):

  ==============  ======================================================
  item answer     taken as
  ==============  ======================================================
  409             ``older`` (``version_conflict_engine_exception``): the
                  index holds this version or a newer one
  mapping         **rejected**: ``mapper_parsing_exception``,
                  ``document_parsing_exception``,
                  ``strict_dynamic_mapping_exception``, and
                  ``illegal_argument_exception`` when its reason is about
                  a field, mapper, mapping or term (too many fields, an
                  immense term); the rest of the batch is applied
  before ES       **rejected**: NaN/Infinity, a lone surrogate, an int
                  beyond 64 bits, a reserved field name, an id over 512
                  bytes, one document over ``http.max_content_length``
  closed index    ``RetryableError`` (``index_closed_exception``) naming
                  the index and the fix: ``POST <index>/_open``, or
                  reindex. Retried, then the follower stops (FatalError)
  transient       ``RetryableError``: 429/502/503/504, thread pool
                  rejections, circuit breakers, ``cluster_block_exception``
                  (write blocks, disk watermarks); replaying is idempotent
  needs a person  ``FatalError``: ``index_not_found_exception`` (the alias
                  is gone: open creates it), ``security_exception``
  anything else   ``RetryableError`` ("does not classify"), then
                  ``FatalError``: never rejected
  ==============  ======================================================

  Failures of a whole request: connection errors and 429/502/503/504 retry,
  413 splits the chunk, the rest is ``FatalError``.
- Writes do not refresh; the follower calls ``make_visible`` once a batch is written, which refreshes the
  written indexes (``refresh_each_batch``, on by default: a search sees a batch when it is applied, not up to
  ``refresh_interval`` later; docs/performance.md). ``held`` refreshes too.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any, cast

import orjson
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import ApiError, Elasticsearch

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import CdcsyncError, FatalError, RetryableError, mapped
from cdcsync.sync.mapping import Row, TableMapping, scalar_text
from cdcsync.sync.sink import Generations, WriteResult, batched, redact_url
from cdcsync.sync.sinks import secret
from cdcsync.sync.sinks.elasticsearch_errors import (
    RETRYABLE_STATUS,
    RETRYABLE_TYPES,
    classify_item,
    error_type,
    reason,
)
from cdcsync.sync.sinks.elasticsearch_fields import properties
from cdcsync.sync.sinks.elasticsearch_index import Drift, IndexSpecs, bring_live, drift_recorder, report
from cdcsync.sync.sinks.elasticsearch_markers import DELETED_AT_FIELD, DELETED_AT_MAPPING, DELETED_FIELD, Purged, purge

log = logging.getLogger(__name__)

VERSION_FIELD = "cdcsync_version"
OWN_FIELDS = (VERSION_FIELD, DELETED_FIELD, DELETED_AT_FIELD)  # cdcsync.config.INDEX_OWN_FIELDS
FIRST_GENERATION = "000001"
CHUNK_ROWS = 1000
CHUNK_BYTES = 8 * 1024 * 1024  # far below http.max_content_length (100 MB): bounded memory on both ends
PAGE = 1000
SCAN_BYTES = 8 * 1024 * 1024  # a scan page's documents, about, past its first
SCAN_PAGES = (100, 5000)  # the fewest and the most documents of a scan page past its first
DROP_GRACE_S = 3.0  # publish: how long requests that resolved the alias to the old index get to finish
NAMES_PER_REQUEST = 2000  # characters of index names per delete: the request line stays under ES's 4 KB

NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# What _bulk reads of a bulk answer: per item its status and error. The whole answer is ~200 bytes per
# document (index, id, version, shards, seq_no ...), which Elasticsearch writes and the client parses.
BULK_ANSWER = "items.*.status,items.*.error"
HIDE_MARKERS = {"bool": {"must_not": {"term": {DELETED_FIELD: True}}}}
MAX_ID_BYTES = 512  # longer: ES fails the WHOLE bulk request (action_request_validation_exception)


def client_options(follower: FollowerConfig) -> dict[str, Any]:
    """The follower's credentials and CA as the client's options (``None``: not set); never in the URL."""
    password = secret(follower.password)
    return {
        "basic_auth": (follower.username, password) if follower.username and password is not None else None,
        "api_key": secret(follower.api_key),
        "ca_certs": follower.tls_ca,
    }


class ElasticsearchSink:
    """Applies rows to ``<index_prefix><target>`` aliases; see the module docstring."""

    order_free = True  # the version rule decides, whatever order writes land in (sync.sinks)
    fill_order_free = True
    needs_spark = False
    chunk_rows: int | None = 1000  # the follower writes chunks of this many records, parsing the next meanwhile
    writers = 2  # a batch's chunks written at once: the server works on one while the client parses the other's answer
    # A bootstrap's or reindex's: 3 filled a staged index 7-24 % faster than 2 in 7 of 8 paired runs, 4 no faster
    # than 3 (docs/performance.md, "Bootstrap from the topics"). Not the daemon's: each of its tasks holds its chunks.
    fill_writers = 3

    @classmethod
    def from_config(cls, config: Config, follower: FollowerConfig, spark: object = None) -> ElasticsearchSink:
        return cls(
            follower.name,
            follower.url or "",
            index_prefix=follower.prefix,
            refresh_each_batch=follower.refresh_each_batch,
            indexes=IndexSpecs.of_config(config, follower),
            on_drift=drift_recorder(config, follower),
            **client_options(follower),
        )

    @staticmethod
    def probe(config: Config, follower: FollowerConfig, timeout_s: float) -> tuple[bool, str]:
        """Cluster health, not a ping: the local stack's distribution has no ``GET /`` (docs/local-stack.md)."""
        auth = {k: v for k, v in client_options(follower).items() if v is not None}
        client = Elasticsearch(follower.url or "", request_timeout=timeout_s, max_retries=0, **auth)
        try:
            colour = client.cluster.health(timeout=f"{int(timeout_s)}s")["status"]
        finally:
            client.close()
        return colour != "red", f"elasticsearch cluster {colour}"

    def __init__(
        self,
        name: str,
        url: str,
        index_prefix: str = "",
        *,
        index_settings: Mapping[str, Any] | None = None,
        indexes: IndexSpecs | None = None,
        on_drift: Drift | None = None,
        basic_auth: tuple[str, str] | None = None,
        api_key: str | None = None,
        ca_certs: str | None = None,
        refresh_each_batch: bool = True,
    ) -> None:
        self.name = name
        self.refresh_each_batch = refresh_each_batch
        self.url = redact_url(url)
        self.index_prefix = index_prefix
        # Each target's index settings; ``index_settings``: the same free-form ones for all (no config at hand).
        self.indexes = indexes or IndexSpecs.of_settings(index_settings)
        self.on_drift = on_drift  # told what only a new index takes, per target, at each open (elasticsearch_index)
        # Credentials go in headers, never in the URL the client names in its errors; unset ones are not passed.
        auth: dict[str, Any] = {"basic_auth": basic_auth, "api_key": api_key, "ca_certs": ca_certs}
        # The client retries a timed-out bulk itself: safe, every action is idempotent.
        self._client = Elasticsearch(
            url,
            request_timeout=60,
            max_retries=2,
            retry_on_timeout=True,
            **{k: v for k, v in auth.items() if v is not None},
        )
        self.generations = Generations()  # target -> its staged generation's index, until publish

    def alias(self, target: str) -> str:
        return f"{self.index_prefix}{target}"

    def index_of(self, target: str) -> str:
        """Where this instance writes and reads ``target``: its staged generation's index, else the alias."""
        return self.generations.where(target, self.alias(target))

    # ------------------------------------------------------------------ open

    def learn(self, mapping: TableMapping) -> None:
        """Put the new fields' explicit mapping before documents bring them (dynamic mapping would guess)."""
        for target, props in self._targets([mapping]).items():
            with self._errors(f"open {self.alias(target)}"):
                self._ensure(target, props, check=False)

    def open(self, mappings: Sequence[TableMapping]) -> None:
        """Create each target's index and alias if missing; bring existing ones to the fields and settings
        configured where they can be, and report what only a new index takes (``elasticsearch_index``)."""
        for target, props in self._targets(mappings).items():
            with self._errors(f"open {self.alias(target)}"):
                self._ensure(target, props, check=True)

    def _targets(self, mappings: Sequence[TableMapping]) -> dict[str, dict[str, Any]]:
        properties: dict[str, dict[str, Any]] = defaultdict(dict)
        for mapping in mappings:  # several tables may feed one target
            properties[mapping.target].update(self._properties(mapping))
        return properties

    @staticmethod
    def _properties(mapping: TableMapping) -> dict[str, Any]:
        own = {VERSION_FIELD: {"type": "long"}, DELETED_FIELD: {"type": "boolean"}}
        return properties(mapping, {**own, DELETED_AT_FIELD: DELETED_AT_MAPPING})

    def _ensure(self, target: str, props: dict[str, Any], check: bool) -> None:
        """The target's live index and alias as configured; ``check``: its settings too, drift reported."""
        alias, indices, spec = self.alias(target), self._client.indices, self.indexes.of(target)
        index = f"{alias}-{FIRST_GENERATION}"
        alias_body = {"is_write_index": True, "filter": HIDE_MARKERS}
        for _attempt in range(2):  # a second pass only after losing a creation race
            if indices.exists_alias(name=alias):
                try:  # additive; a changed type is a 400, and only a reindex can apply it
                    needs = bring_live(self._client, self.name, alias, props, spec, check)
                except ApiError as err:
                    if err.meta.status != 400:
                        raise
                    raise FatalError(
                        f"index {alias}: mapping no longer fits the table ({err}; a source column changed type?); "
                        f"run `cdcsync reindex {self.name} --table {target} --from source`"
                    ) from None
                if check:
                    report(self.name, alias, target, needs, self.on_drift)
                return
            if indices.exists(index=alias):
                raise FatalError(f"{alias} is a concrete index, not an alias (auto-created?); delete it and reopen")
            try:
                if indices.exists(index=index):
                    indices.update_aliases(actions=[{"add": {"index": index, "alias": alias, **alias_body}}])
                else:
                    self._create(index, target, props, aliases={alias: alias_body})
                    if check and self.on_drift is not None:
                        self.on_drift(target, None)
                return
            except ApiError as err:
                if error_type(err.body) != "resource_already_exists_exception":
                    raise

    def settle(self) -> None:
        """Nothing deferred: ``forget`` removes the fields at once."""

    def make_visible(self, targets: Sequence[str]) -> None:
        """Refresh the targets' indexes, so a search sees the batch now rather than after ``refresh_interval``.

        Once per batch, on the driver; skipped with ``refresh_each_batch: false``. A refresh that fails
        is only logged: the writes are acknowledged, and the index's own refresh shows them later.
        """
        live = sorted(set(targets) - set(self.generations))  # a staged index has no readers; publish refreshes it
        if not self.refresh_each_batch or not live:
            return
        indexes = ",".join(self.alias(t) for t in live)
        try:
            with self._errors(f"refresh {indexes}"):
                self._client.indices.refresh(index=indexes)
        except CdcsyncError as err:
            log.warning("sink=%s refresh after the batch failed (the index refreshes itself later): %s", self.name, err)

    def forget(self, target: str, fields: Sequence[str]) -> None:
        """Remove ``fields`` from every document of ``target`` (DROP COLUMN), at the version each one has.

        Rounds of a search for documents still holding one of the fields, each
        written back without them with ``version_type=external_gte`` and its
        own version: the apply rule's order is untouched, and a document
        changed meanwhile (a higher version) is left to that change. The
        mapping keeps the fields (Elasticsearch cannot remove one); no
        document has them.
        """
        index = self.index_of(target)
        holding = {"bool": {"should": [{"exists": {"field": f}} for f in fields], "minimum_should_match": 1}}
        removed = 0
        while True:
            with self._errors(f"refresh {index}"):
                self._client.indices.refresh(index=index)
            with self._errors(f"search {index}"):
                found = self._client.search(index=index, query=holding, size=PAGE, version=True)
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
            with self._errors(f"bulk {index}"):
                answer = self._client.bulk(operations=operations, filter_path=BULK_ANSWER)
            statuses = [next(iter(item.values()))["status"] for item in answer.get("items", [])]
            done = sum(1 for s in statuses if s < 300)
            failed = [s for s in statuses if s >= 300 and s != 409]
            if failed or not done:
                raise RetryableError(f"index {index}: removing fields {list(fields)} failed (statuses {failed[:5]})")
            removed += done
        log.info("index=%s dropped_fields=%s documents=%d", index, list(fields), removed)

    def _create(
        self,
        index: str,
        target: str,
        props: dict[str, Any],
        aliases: dict[str, Any] | None = None,
        *,
        fill: bool = False,
    ) -> None:
        spec = self.indexes.of(target)
        self._client.indices.create(
            index=index,
            settings=spec.create_settings(fill),  # fill: a staged index, nobody searches it until publish
            # date_detection off: an untyped text column whose first value looks like a date
            # would be mapped `date` and every later non-date value rejected.
            mappings={"dynamic": True, "date_detection": False, "properties": {**props, **spec.properties}},
            aliases=aliases,
        )

    # ------------------------------------------------------------------ generations

    def take_over(self, staged: Mapping[str, str], mappings: Sequence[TableMapping]) -> None:
        """Write to another process's staged generations (``snapshot.parallel``): they exist already."""
        self.generations = Generations(staged)

    def stage(self, mappings: Sequence[TableMapping]) -> None:
        """Create the next generation of each target's index, without the alias (module docstring)."""
        for target, props in self._targets(mappings).items():
            with self._errors(f"stage {self.alias(target)}"):
                self.generations.stage(target, self._stage_one(target, props))

    def _stage_one(self, target: str, props: dict[str, Any]) -> str:
        alias = self.alias(target)
        if self._client.indices.exists(index=alias) and not self._client.indices.exists_alias(name=alias):
            raise FatalError(f"{alias} is a concrete index, not an alias (auto-created?); delete it and reindex")
        generations, live = self._generations(alias), self._behind(alias)
        for leftover in sorted(set(generations) - set(live)):  # an earlier stage that was never published
            self._client.indices.delete(index=leftover)
        index = f"{alias}-{max(generations.values(), default=0) + 1:06d}"
        self._create(index, target, props, fill=True)
        return index

    def _generations(self, alias: str) -> dict[str, int]:
        """Every generation's index of the alias's layout, ``<alias>-NNNNNN`` -> N (other targets' never match)."""
        found = self._client.indices.get(index=f"{alias}-*", expand_wildcards="open,closed", allow_no_indices=True)
        pattern = re.compile(re.escape(alias) + r"-(\d{6})")
        return {name: int(m.group(1)) for name in found if (m := pattern.fullmatch(name))}

    def _behind(self, alias: str) -> list[str]:
        if not self._client.indices.exists_alias(name=alias):
            return []
        return sorted(self._client.indices.get_alias(name=alias))

    def publish(self) -> None:
        """Move every staged target's alias to its new index in one request, then drop the old indexes.

        One ``_aliases`` request for all targets: readers see every target switch at once, and a
        bootstrap of many tables waits out ``DROP_GRACE_S`` once, not once per table.
        """
        staged = dict(self.generations.items())
        if not staged:
            return
        for target, generation in staged.items():
            with self._errors(f"publish {generation}"):
                self._ready(target, generation)
        actions: list[dict[str, Any]] = []
        old: list[str] = []
        for target, generation in staged.items():
            alias = self.alias(target)
            with self._errors(f"publish {generation}"):
                behind = [index for index in self._behind(alias) if index != generation]
            actions += [{"remove": {"index": index, "alias": alias}} for index in behind]
            shown = {"index": generation, "alias": alias, "is_write_index": True, "filter": HIDE_MARKERS}
            actions.append({"add": shown})
            old += behind
        names = ", ".join(staged.values())
        with self._errors(f"publish {names}"):
            self._client.indices.update_aliases(actions=actions)  # atomic for readers
        self.generations.clear()
        if old:
            time.sleep(DROP_GRACE_S)
            for chunk in _name_lists(old):
                with self._errors(f"dropping {chunk}"):
                    self._client.indices.delete(index=chunk)

    def _ready(self, target: str, index: str) -> None:
        """Put a staged index's own refresh interval back, check it, and refresh it (module docstring)."""
        wanted = self.indexes.of(target).refresh_interval
        self._client.indices.put_settings(index=index, settings={"index": {"refresh_interval": wanted}})
        now = self._client.indices.get_settings(index=index, name="index.refresh_interval", flat_settings=True)
        found = now.get(index, {}).get("settings", {}).get("index.refresh_interval")  # none listed: the default
        if found != wanted:  # None on both sides: the server's default
            raise RetryableError(f"{index}: refresh_interval is {found!r} after restoring it to {wanted!r}")
        self._client.indices.refresh(index=index)

    def purge_markers(self, target: str, horizon_s: float, now: float | None = None) -> Purged:
        """Remove the live index's delete markers written more than ``horizon_s`` ago (``elasticsearch_markers``)."""
        alias = self.alias(target)
        with self._errors(f"purge delete markers of {alias}"):
            return purge(self._client, self._behind(alias), horizon_s, time.time() if now is None else now)

    # ------------------------------------------------------------------ write

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        """Apply a batch of last-per-key rows in bulk requests of at most CHUNK_ROWS rows / CHUNK_BYTES."""
        result = WriteResult()
        chunk: list[tuple[Row, bytes, bytes]] = []
        size = 0
        marked_at = int(time.time() * 1000)  # a delete marker's time: the purge keeps it a compaction horizon
        for row in rows:
            try:
                action, source = self._encode(row, marked_at)
            except (TypeError, ValueError) as err:  # NaN, a lone surrogate, a reserved field name
                result.rejected.append((row, f"cannot be sent to elasticsearch: {err}"))
                continue
            if chunk and (len(chunk) >= CHUNK_ROWS or size + len(action) + len(source) > CHUNK_BYTES):
                result = result.merge(self._bulk(chunk))
                chunk, size = [], 0
            chunk.append((row, action, source))
            size += len(action) + len(source)
        if chunk:
            result = result.merge(self._bulk(chunk))
        return result  # the follower logs the batch's counts

    def _encode(self, row: Row, marked_at: int) -> tuple[bytes, bytes]:
        # require_alias: if the alias vanished, fail instead of auto-creating an unmapped index.
        # A staged index is written by its concrete name; it exists, stage() created it.
        id_bytes = len(row.doc_id.encode())  # a lone surrogate raises here too (UnicodeEncodeError)
        if id_bytes > MAX_ID_BYTES:
            raise ValueError(f"document id of {id_bytes} bytes; elasticsearch takes at most {MAX_ID_BYTES} bytes")
        ident = {
            "_index": self.index_of(row.target),
            "_id": row.doc_id,
            "require_alias": row.target not in self.generations,
        }
        action = {"index": {**ident, "version": row.version, "version_type": "external"}}
        if row.doc is None:
            source: dict[str, Any] = {DELETED_FIELD: True, VERSION_FIELD: row.version, DELETED_AT_FIELD: marked_at}
        else:
            source = self.stored_form(row.doc)
            if VERSION_FIELD in source or DELETED_FIELD in source or DELETED_AT_FIELD in source:
                raise ValueError(f"fields {', '.join(OWN_FIELDS)} are reserved for cdcsync")
            if any(isinstance(v, float) and not math.isfinite(v) for v in source.values()):
                raise ValueError("NaN and Infinity have no JSON form")  # orjson would write null
            source[VERSION_FIELD], source[DELETED_FIELD] = row.version, False
        # orjson: a tenth of json's time per document; a lone surrogate raises (TypeError), as it should.
        return orjson.dumps(action), orjson.dumps(source)

    def _bulk(self, chunk: list[tuple[Row, bytes, bytes]]) -> WriteResult:
        lines = [line for _row, action, source in chunk for line in (action, source)]
        try:
            # The client passes pre-encoded NDJSON lines through; its type hint only knows dicts.
            with self._errors("bulk"):
                response = self._client.bulk(operations=cast(Any, lines), filter_path=BULK_ANSWER)
        except _TooLarge:
            if len(chunk) == 1:
                return WriteResult(rejected=[(chunk[0][0], "request entity too large (http.max_content_length)")])
            half = len(chunk) // 2
            return self._bulk(chunk[:half]).merge(self._bulk(chunk[half:]))
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
                raise self._item_error(kind, status, error or {}, row.target)
        return result

    def _item_error(self, kind: str, status: int, error: dict[str, Any], target: str) -> Exception:
        """The error that stops a batch for an item Elasticsearch refused for a reason not about its row."""
        refused = f"elasticsearch {self.url} refused a write to {self.index_of(target)} ({status}): {reason(error)}"
        if kind == "closed":  # someone closed it; retried, then the follower stops: never dead letters
            index = error.get("index") or self.index_of(target)
            return RetryableError(
                f"{refused}; the index {index} is closed: open it (POST {index}/_open) or rebuild the target"
                f" (cdcsync reindex {self.name})",
                retry_after=5.0,
            )
        if kind == "retry":
            return RetryableError(refused)
        if error.get("type") == "index_not_found_exception":
            return FatalError(f"{refused}; open() creates the alias {self.alias(target)}")
        if kind == "fatal":
            return FatalError(f"{refused}; grant the user of sink {self.name} the index privilege on {target}")
        # In doubt, retry and let the follower stop after its attempts; a rejection would lose the row.
        return RetryableError(f"{refused}; an error cdcsync does not classify, retrying", retry_after=2.0)

    # ------------------------------------------------------------------ read

    def held(self, target: str) -> dict[str, tuple[int, dict[str, Any]]]:
        """Every live document behind the alias (or in the staged index): ``{id: (version, doc)}``."""
        return {ident: (version, doc) for ident, version, doc in self.scan(target)}

    def scan(self, target: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Every live document at one point in time, a page at a time: ``(id, version, doc)``.

        The first page is ``PAGE`` documents; the next ones hold about ``SCAN_BYTES`` of JSON by the first
        page's documents' size, within ``SCAN_PAGES``: a million narrow documents read 2x faster in pages of
        5,000 than of 1,000, and a page of 5,000 wide ones (60 KB) would be 300 MB.
        """
        alias = self.index_of(target)
        if target in self.generations:
            with self._errors("check index"):
                exists = self._client.indices.exists(index=alias)
        else:
            with self._errors("check alias"):
                exists = self._client.indices.exists_alias(name=alias)
        if not exists:
            return
        with self._errors("refresh"):
            self._client.indices.refresh(index=alias)
        with self._errors("open point in time"):
            pit_id = self._client.open_point_in_time(index=alias, keep_alive="2m")["id"]
        search_after: list[Any] | None = None
        size = PAGE
        try:
            while True:
                with self._errors("search"):
                    page = self._client.search(
                        pit={"id": pit_id, "keep_alive": "2m"},
                        query=HIDE_MARKERS,  # the point in time keeps the alias filter; this says it once more
                        sort=[{"_shard_doc": "asc"}],
                        size=size,
                        version=True,
                        track_total_hits=False,
                        search_after=search_after,
                    )
                pit_id, hits = page["pit_id"], page["hits"]["hits"]
                for hit in hits:
                    doc = {k: v for k, v in hit["_source"].items() if k not in (VERSION_FIELD, DELETED_FIELD)}
                    yield hit["_id"], hit["_version"], doc
                if len(hits) < size:
                    return
                if search_after is None:  # sized by the first page's documents
                    each = max(1, sum(len(orjson.dumps(hit["_source"])) for hit in hits) // len(hits))
                    size = min(max(SCAN_BYTES // each, SCAN_PAGES[0]), SCAN_PAGES[1])
                search_after = hits[-1]["sort"]
        finally:
            # Best effort: an unclosed point in time expires by itself after its keep_alive.
            with suppress(ApiError, TransportConnectionError, ConnectionTimeout):
                self._client.close_point_in_time(id=pit_id)

    def lookup(self, target: str, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live documents of these ids (real-time gets, ``PAGE`` ids a request): ``(id, version, doc)``."""
        index = self.index_of(target)
        for chunk in batched(ids, PAGE):
            with self._errors("get documents"):
                found = self._client.mget(index=index, ids=list(chunk), realtime=True)["docs"]
            for hit in found:
                source = hit.get("_source")
                if not hit.get("found") or source is None or source.get(DELETED_FIELD):
                    continue
                doc = {k: v for k, v in source.items() if k not in (VERSION_FIELD, DELETED_FIELD)}
                yield hit["_id"], hit["_version"], doc

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The canonical document as JSON, as ``_source`` stores and returns it."""
        return {field: _json_safe(value) for field, value in doc.items()}

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ errors

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return mapped(what, self._mapped)

    def _mapped(self, err: Exception, what: str) -> Exception | None:
        """A client failure met during ``what`` as one of the two error roots (``cdcsync.errors.mapped``)."""
        if isinstance(err, TlsError):
            return FatalError(f"elasticsearch {self.url}: TLS failed ({err}); check the URL scheme and CA")
        if isinstance(err, TransportConnectionError | ConnectionTimeout):
            return RetryableError(f"elasticsearch {self.url} unreachable during {what}: {err}")
        if not isinstance(err, ApiError):
            return None
        status = err.meta.status
        if status == 413:
            return _TooLarge()
        if status in RETRYABLE_STATUS or error_type(err.body) in RETRYABLE_TYPES:
            return RetryableError(f"elasticsearch {self.url} refused {what} ({status}): {err}")
        return FatalError(f"elasticsearch {self.url}: {what} failed ({status}): {err}")


class _TooLarge(Exception):
    """HTTP 413: the bulk body exceeds the server's http.max_content_length."""


_PLAIN = frozenset({str, int, float, bool})


def _name_lists(names: Sequence[str]) -> Iterator[str]:
    """``names`` as comma-separated lists of at most ~NAMES_PER_REQUEST characters each."""
    chunk: list[str] = []
    size = -1  # the joined length: a comma before each name but the first
    for name in names:
        if chunk and size + 1 + len(name) > NAMES_PER_REQUEST:
            yield ",".join(chunk)
            chunk, size = [], -1
        chunk.append(name)
        size += 1 + len(name)
    if chunk:
        yield ",".join(chunk)


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
