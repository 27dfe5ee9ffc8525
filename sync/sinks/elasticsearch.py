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

Generations (``stage``/``publish``, ``elasticsearch_generations``): a bootstrap or reindex fills a new index
``PT-000002`` that no alias points to, then moves every staged target's alias to its new index in ONE
``_aliases`` request: a reader resolves an alias to the old index or to the new one, never to none or both, and
sees all targets switch together. The old indexes are deleted after a grace.

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
- **Errors** (``elasticsearch_errors``; the sink contract's rule: only an error
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
  closed index    ``TableError`` (``index_closed_exception``) naming
                  the index and the fix: ``POST <index>/_open``, or
                  reindex. Retried, then that table is held alone
                  (``sync.held``) and the follower's others go on
  index block     ``TableError`` too: a ``cluster_block_exception`` on
                  that index (``index.blocks.write``, a disk flood
                  stage's read-only block), naming how to lift it
  transient       ``RetryableError``: 429/502/503/504, thread pool
                  rejections, circuit breakers, a cluster-wide
                  ``cluster_block_exception``; replaying is idempotent
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
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from elasticsearch import ApiError, Elasticsearch

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import CdcsyncError, FatalError, RetryableError, TableError, mapped
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sink import Generations, MarkerPurge, Purged, Sink, WriteResult, redact_url
from cdcsync.sync.sinks import elasticsearch_bulk as bulk
from cdcsync.sync.sinks import elasticsearch_reads as reads
from cdcsync.sync.sinks import secret
from cdcsync.sync.sinks.elasticsearch_errors import error_type, reason, root
from cdcsync.sync.sinks.elasticsearch_fields import by_target
from cdcsync.sync.sinks.elasticsearch_generations import (
    FIRST_GENERATION,
    behind,
    drop_old,
    next_generation,
    swap_aliases,
)
from cdcsync.sync.sinks.elasticsearch_index import Drift, IndexSpecs, bring_live, drift_recorder, report
from cdcsync.sync.sinks.elasticsearch_markers import HIDE_MARKERS, purge

log = logging.getLogger(__name__)


def client_options(follower: FollowerConfig) -> dict[str, Any]:
    """The follower's credentials and CA as the client's options (``None``: not set); never in the URL."""
    password = secret(follower.password)
    return {
        "basic_auth": (follower.username, password) if follower.username and password is not None else None,
        "api_key": secret(follower.api_key),
        "ca_certs": follower.tls_ca,
    }


class ElasticsearchSink(Sink, MarkerPurge):
    """Applies rows to ``<index_prefix><target>`` aliases; see the module docstring."""

    order_free = True  # the version rule decides, whatever order writes land in (sync.sinks)

    holds_objects = True  # objects and arrays of them are fields of a document (`object`, `nested`)
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
        for target, props in by_target([mapping]).items():
            with self._errors(f"open {self.alias(target)}"):
                self._ensure(target, props, check=False)

    def open(self, mappings: Sequence[TableMapping]) -> None:
        """Create each target's index and alias if missing; bring existing ones to the fields and settings
        configured where they can be, and report what only a new index takes (``elasticsearch_index``)."""
        for target, props in by_target(mappings).items():
            with self._errors(f"open {self.alias(target)}"):
                self._ensure(target, props, check=True)

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
                    command = f"cdcsync reindex {self.name} --table {target} --from source"
                    raise TableError(  # this table's alone: held, its follower's other tables go on (sync.held)
                        target,
                        f"index {alias}: mapping no longer fits the table ({err}; a source column changed type?); "
                        f"run `{command}`",
                        f"run `{command}`",
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
        """Remove ``fields`` from every document of ``target`` (DROP COLUMN), at the version each one has
        (``elasticsearch_bulk.drop_fields``)."""
        index = self.index_of(target)
        removed = bulk.drop_fields(self._client, index, fields, self._errors)
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
        """Create the next generation of each target's index, without the alias (``elasticsearch_generations``)."""
        for target, props in by_target(mappings).items():
            with self._errors(f"stage {self.alias(target)}"):
                index = next_generation(self._client, self.alias(target))
                self._create(index, target, props, fill=True)
                self.generations.stage(target, index)

    def publish(self) -> None:
        """Move every staged target's alias to its new index in one request, then drop the old indexes.

        One ``_aliases`` request for all targets: readers see every target switch at once, and a
        bootstrap of many tables waits out ``DROP_GRACE_S`` once, not once per table (``elasticsearch_generations``).
        """
        staged = {self.alias(t): (index, self.indexes.of(t).refresh_interval) for t, index in self.generations.items()}
        if not staged:
            return
        old = swap_aliases(self._client, staged, self._errors)
        self.generations.clear()
        drop_old(self._client, old, self._errors)

    def purge_markers(self, target: str, horizon_s: float, now: float | None = None) -> Purged:
        """Remove the live index's delete markers written more than ``horizon_s`` ago (``elasticsearch_markers``)."""
        alias = self.alias(target)
        with self._errors(f"purge delete markers of {alias}"):
            return purge(self._client, behind(self._client, alias), horizon_s, time.time() if now is None else now)

    # ------------------------------------------------------------------ write

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        """Apply a batch of last-per-key rows in bulk requests of at most CHUNK_ROWS rows / CHUNK_BYTES (``bulk``)."""
        return bulk.write(self._client, rows, self._where, self._errors, self._item_error)  # the follower logs it

    def _where(self, target: str) -> tuple[str, bool]:
        """The index ``target``'s rows are written to, and whether it must be an alias (not when staged)."""
        return self.index_of(target), target not in self.generations

    def _item_error(self, kind: str, status: int, error: dict[str, Any], target: str) -> Exception:
        """The error that stops a batch for an item Elasticsearch refused for a reason not about its row."""
        refused = f"elasticsearch {self.url} refused a write to {self.index_of(target)} ({status}): {reason(error)}"
        if kind == "closed":  # someone closed it; retried, then this table is held alone: never dead letters
            index = error.get("index") or self.index_of(target)
            return TableError(
                target,
                f"{refused}; the index {index} is closed",
                f"open it (POST {index}/_open) or rebuild the target (cdcsync reindex {self.name} --table ...)",
                retry_after=5.0,
            )
        if kind == "retry" and error.get("type") == "cluster_block_exception" and "index [" in str(error.get("reason")):
            index = self.index_of(target)
            return TableError(  # a block on this index alone (index.blocks.write, or a disk flood stage's)
                target,
                refused,
                f'lift the block (PUT {index}/_settings {{"index.blocks.write": null, '
                f'"index.blocks.read_only_allow_delete": null}}; after a disk flood stage, free disk first)',
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
        """Every live document at one point in time, a page at a time: ``(id, version, doc)`` (``reads.scan``)."""
        yield from reads.scan(self._client, self.index_of(target), target in self.generations, self._errors)

    def lookup(self, target: str, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live documents of these ids (real-time gets, ``reads.PAGE`` ids a request): ``(id, version, doc)``."""
        yield from reads.lookup(self._client, self.index_of(target), ids, self._errors)

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The canonical document as JSON, as ``_source`` stores and returns it."""
        return bulk.stored_form(doc)

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ errors

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return mapped(what, self._mapped)

    def _mapped(self, err: Exception, what: str) -> Exception | None:
        """A client failure met during ``what`` as one of the two error roots (``cdcsync.errors.mapped``)."""
        return root(err, what, self.url)
