"""Delta Lake sink: one path-based Delta table per target, written by a version-guarded MERGE.

``<path>/<target>`` holds one row per document id: the mapped columns plus
``_cdcsync_id``, ``_cdcsync_version``, ``_cdcsync_deleted`` and
``_cdcsync_commit_ts``. With ``history=True``, ``<path>/<target>__history``
holds one row per change: id, ``_cdcsync_op``, version, commit time, deleted
flag and ``_cdcsync_doc`` (``mapping.fingerprint`` JSON).

Guarantees (``cdcsync.sync.sink``):

- **Apply rule**: MERGE on ``_cdcsync_id`` updates only when the incoming
  version is higher and inserts unknown ids; the rest is ``older``.
  ``applied`` = inserted + updated rows of that MERGE's own commit metrics.
  The ON condition also lists the batch's ids (``among``): the same rows
  match, and the MERGE's scans that write read only the Parquet pages that
  may hold one (Delta's first scan, for the touched files, still reads
  every id).
- **Delete markers**: a delete keeps the row, ``_cdcsync_deleted = true`` with
  the delete's version (data kept with ``soft_delete``, nulled otherwise); a
  delete of an unknown id inserts a marker. **Readers filter**
  ``NOT _cdcsync_deleted``, as ``live(target)`` and ``held`` do.
- **Idempotent batches** by the version guard alone; the history table is
  insert-only on (id, version), so a replay adds nothing there either (that
  MERGE reads the history table). Delta's ``txnAppId``/``txnVersion`` keyed on
  the batch id would silently drop the batches of a new checkpoint (ids restart
  at 0), so they are not used.
- **Errors** (the sink contract's rule: only an error about that one row
  rejects it). Values are checked against the column types in Python before
  the DataFrame is built, so the MERGE itself never fails for one row:

  ===============  =========================================================
  error            taken as
  ===============  =========================================================
  value vs column  **rejected**: a value of another Python type than its
                   column's (``delta_values.encode``), a decimal beyond an
                   older table's DECIMAL(p,s), an int beyond BIGINT, a datetime out of
                   range, a value ``json`` cannot encode (JSON and
                   undeclared columns)
  commit conflict  ``RetryableError`` (``io.delta.exceptions.Concurrent*``):
                   the follower retries the batch
  anything else    ``FatalError`` naming the table and Spark's error (the
                   file system, the JVM, a schema clash): never rejected
  ===============  =========================================================

Generations: ``stage`` recreates ``<path>/<target>__staging`` (dropping an
unpublished one), which this instance then writes and reads. Nobody reads a
staged table, so it is filled as a load, not MERGEd: each write's rows go to
a Parquet file of ``<path>/<target>__staging__spool`` (``delta_load``).
``publish`` overwrites the live table in ONE commit with the newest row of
each id there (``overwriteSchema``: a reindex may change types): readers see
the previous version until then, and a new follower's table first appears
with it; then the staged table's paths go.
cdcsync's writers of one table take turns (``delta_writers``: the daemon and
a reindex both write the live table); a conflict with any other writer is a
``RetryableError``, and publish again is idempotent. On object storage no
turns are taken (no lock file there), and Delta's log store decides what two
writers of a table risk: docs/object-storage.md. The history table is shared (insert-only: a rebuild adds nothing).

Column types, and how a value goes into its column and comes back (``held``):
``delta_values``. Each table's log checkpoints are written beside the batches, not
inside every tenth MERGE: ``delta_checkpoints``. The sink composes one object of
each of its parts, each made with what it works with, none with the sink: the
tables, made, altered and removed by ``delta_tables.Tables`` (which holds them,
their spools and the Spark session), written by ``delta_merge.Merge``, read by
``delta_reads.Reads`` (``held``, ``scan``, ``lookup``, ``live``) and published
by ``delta_publish.Publish``; the history table is written by
``delta_history.History``. None of those modules imports this one.
"""

from __future__ import annotations

import gc
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from cdcsync.config import Config, FollowerConfig
from cdcsync.config.runtime import DeltaSettings
from cdcsync.errors import FatalError, RetryableError, TableError, mapped
from cdcsync.sync.mapping import Row
from cdcsync.sync.sink import Digesting, Generations, Sink, WriteResult
from cdcsync.sync.sinks import delta_checkpoints as checkpoints
from cdcsync.sync.sinks import delta_load as load
from cdcsync.sync.sinks import delta_reads as reads
from cdcsync.sync.sinks import object_store
from cdcsync.sync.sinks.delta_history import History
from cdcsync.sync.sinks.delta_merge import Merge
from cdcsync.sync.sinks.delta_publish import Publish
from cdcsync.sync.sinks.delta_tables import Table, Tables, table_root, wanted_columns
from cdcsync.sync.sinks.delta_writers import each_table

if TYPE_CHECKING:
    from cdcsync.sync.mapping import TableMapping

log = logging.getLogger(__name__)

# io.delta.exceptions.* (and their DELTA_CONCURRENT_* error classes): another writer committed first.
# A MERGE's failure that is about its table alone: the table made append-only, its files not writable, its
# log not a Delta table's. The follower holds that table and goes on with the others (sync.held).
TABLE_FAULTS = re.compile(
    r"only allow appends|DELTA_CANNOT_MODIFY_APPEND_ONLY|AccessDeniedException|Permission denied"
    r"|is not a Delta table|DELTA_MISSING_DELTA_TABLE"
)
CONFLICTS = ("ConcurrentAppendException", "ConcurrentModificationException", "ConcurrentDeleteReadException",
             "ConcurrentDeleteDeleteException", "ConcurrentTransactionException", "ConcurrentWriteException",
             "MetadataChangedException", "ProtocolChangedException", "DELTA_CONCURRENT")  # fmt: skip


# A staged generation's directory: ``<target>__staging`` beside the live ``<target>``. The suffix on disk
# stays as it is, so that an upgrade still finds (and removes, on the next stage) the staged generation of a
# reindex or bootstrap interrupted before it.
STAGED_SUFFIX = "__staging"


class DeltaSink(Sink, Digesting):
    """Applies batches to Delta tables under ``path`` (see the module docstring)."""

    order_free = False  # a MERGE's version guard is per table version: one writer, batches in order

    holds_objects = False  # columns of the table's types; documents are for the other stores
    needs_spark = True
    chunk_rows: int | None = None  # one MERGE per table per batch: a Delta commit costs seconds, chunks multiply them
    writers = 1  # two MERGEs into one table conflict (one batch's tables are MERGEd at once: delta_writers)
    fill_writers = 1
    spooled_fill = True  # a staged table is filled as a load (delta_load); False: MERGEd batch by batch (bench)

    @classmethod
    def from_config(cls, config: Config, follower: FollowerConfig, spark: SparkSession | None) -> DeltaSink:
        # No session: another process of a fill, which only spools (sync.sinks.build_sink allows no other).
        path, at_once = table_root(config, follower), config.delta.tables_at_once
        return cls(follower.name, spark, path, follower.soft_delete, follower.history, tables_at_once=at_once,
                   storage=config.spark.conf)  # fmt: skip

    @staticmethod
    def probe(config: Config, follower: FollowerConfig, timeout_s: float) -> tuple[bool, str]:
        """Whether the tables' directory is readable, or may be created; of a remote path, whether its bucket answers
        (``s3a://``; other schemes are not checked)."""
        path = table_root(config, follower)
        if "://" in path:
            return object_store.probe(path, config.spark.conf, timeout_s)
        where = Path(path)
        if where.is_dir():
            readable = os.access(where, os.R_OK | os.X_OK)
            return readable, f"delta path {where} {'readable' if readable else 'not readable'}"
        parent = next((p for p in where.parents if p.exists()), None)
        creatable = parent is not None and os.access(parent, os.W_OK)
        return creatable, f"delta path {where} not created yet" + (
            "" if creatable else f", and {parent} is not writable"
        )

    def __init__(
        self,
        name: str,
        spark: SparkSession | None,
        path: str,
        soft_delete: bool = False,
        history: bool = False,
        *,
        tables_at_once: int = DeltaSettings().tables_at_once,
        storage: Mapping[str, str] | None = None,
    ) -> None:
        self.name, self.path, self.soft_delete, self.history = name, path.rstrip("/"), soft_delete, history
        self.generations = Generations()  # target -> its staged table's path (its _tables entry), until publish
        # A batch's tables MERGEd at once. Each holds its share of the batch and its own tasks' buffers, so the
        # memory bound of a batch (sync.batching) still holds; more than the cores buys nothing.
        self.tables_at_once = tables_at_once
        self._checkpoints = checkpoints.Checkpoints(spark)  # log checkpoints beside the batches (delta_checkpoints)
        self.storage = dict(storage or {})  # the session's Hadoop settings, which the spools are written with
        # Its parts (module docstring): the tables (and the spools of staged ones) and what writes, reads and
        # publishes them.
        self._tables = Tables(name, spark, history, self._checkpoints, self._errors)
        changes = History(self._tables, self._checkpoints)
        self._merge = Merge(self._tables, changes, self._checkpoints, self._errors, soft_delete, history)
        self._reads = reads.Reads(self._tables, self._errors, soft_delete)
        self._publish = Publish(self._tables, changes, self.generations, self._errors, soft_delete, history)

    @property
    def _spark(self) -> SparkSession:
        return self._tables.spark

    @property
    def fill_order_free(self) -> bool:
        """A fill into spooled staged tables only: each write a file of its own, the newest row kept at publish."""
        staged = [self._tables[target].path for target in self.generations]
        return bool(staged) and all(path in self._tables.spools for path in staged)

    # ------------------------------------------------------------------ contract

    def open(self, mappings: Sequence[TableMapping]) -> None:
        """Create each target's table (and history table) if missing; add columns the mapping gained."""
        for target, columns in wanted_columns(mappings).items():
            self._tables[target] = self._tables.open_table(f"{self.path}/{target}", columns)
            self.generations.published(target)

    def learn(self, mapping: TableMapping) -> None:
        """Note the types of columns the table gained; the writer adds them with the first rows that carry them.

        Not an ALTER here: the writer thread may be merging into the table at
        this moment, and Delta fails a MERGE whose table's schema changed under it.
        """
        table = self._tables.get(mapping.target)
        if table is not None:
            wanted = wanted_columns([mapping])[mapping.target]
            table.learned.update({n: k for n, k in wanted.items() if n not in table.kinds})

    def forget(self, target: str, fields: Sequence[str]) -> None:
        """Note the columns the table lost; the writer drops them, in one new table version, before its next write.

        Not here, for the reason ``learn`` gives. Delta drops a column in
        place only with column mapping (a table protocol older readers cannot
        read); the table is rewritten without it instead, which readers see
        at once, as one commit.
        """
        table = self._tables.get(target)
        if table is not None:
            table.forgotten.update(fields)
            for name in fields:
                table.learned.pop(name, None)

    def settle(self) -> None:
        """Drop forgotten columns now: called while no writer runs (a follower starting, sync.reindex_needed)."""
        for table in self._tables.values():
            self._tables.drop_columns(table)

    def make_visible(self, targets: Sequence[str]) -> None:
        """Nothing to do: a MERGE is visible when its commit is."""

    def stage(self, mappings: Sequence[TableMapping]) -> None:
        """A fresh staged table per target, beside the live one, and its empty spool (module docstring)."""
        for target, columns in wanted_columns(mappings).items():
            path = f"{self.path}/{target}{STAGED_SUFFIX}"
            self._tables.remove(path)
            self._tables.remove(path + load.SUFFIX)
            self._tables[target] = self._tables.open_table(path, columns, history=f"{self.path}/{target}__history")
            with self._errors(f"making the spool {path}{load.SUFFIX} (pyarrow, with spark.conf's fs.s3a.*)"):
                spool = load.spool_at(path + load.SUFFIX, self.storage) if self.spooled_fill else None
            if spool is not None:
                self._tables.spools[path] = spool
            elif self.spooled_fill:  # a file system pyarrow cannot write: the staged table is MERGEd batch by batch
                log.info("sink=%s table=%s spool=none: %s is not a path pyarrow writes", self.name, path, path)
            self.generations.stage(target, path)

    def take_over(self, staged: Mapping[str, str], mappings: Sequence[TableMapping]) -> None:
        """Write to another process's staged tables: to their spools, which ``stage`` made (``snapshot.parallel``)."""
        wanted = wanted_columns(mappings)
        for target, path in staged.items():
            self._tables[target] = Table(path, dict(wanted.get(target, {})), f"{self.path}/{target}__history")
            self._tables.spools[path] = load.Spool(path + load.SUFFIX, self.storage)
            self.generations.stage(target, path)

    def publish(self) -> None:
        """Replace each staged target's live table in one commit, then remove its staged table.

        ``tables_at_once`` targets at a time, as a batch's MERGEs: a bootstrap of many small tables
        is mostly each overwrite's fixed cost.
        """
        calls = [partial(self._publish.publish_one, self.path, target) for target in self.generations]
        each_table(calls, self.tables_at_once)

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        """MERGE each target's rows; see the module docstring for what is applied, older or rejected."""
        result = WriteResult()
        latest: dict[str, dict[str, Row]] = {}
        for row in rows:
            if row.target not in self._tables:
                raise FatalError(f"sink {self.name}: target {row.target!r} was not opened; add its mapping")
            keyed = latest.setdefault(row.target, {})
            held = keyed.get(row.doc_id)  # the follower already keeps one change per key; MERGE needs it
            if held is not None:
                result.older += 1
                if held.version >= row.version:
                    continue
            keyed[row.doc_id] = row
        targets = list(latest)
        calls = [partial(self._write_target, t, list(latest[t].values())) for t in targets]
        parts = each_table(calls, self.tables_at_once)
        for target, part in zip(targets, parts, strict=True):
            log.info(
                "sink=%s batch=%d target=%s rows=%d applied=%d older=%d rejected=%d",
                self.name, batch_id, target, len(latest[target]), part.applied, part.older, len(part.rejected),
            )  # fmt: skip
            result = result.merge(part)
        # Each Py4J proxy a method was called on is in a reference cycle (it caches its bound methods, which
        # point back at it), so only the cyclic collector frees it, and until then its JVM object stays pinned
        # in Py4J's gateway. The MERGE source above (a DataFrame holding the batch's rows, up to the batch's
        # bytes) is one. With the collector slowed down for throughput (sync.build.tune_gc) a collection came
        # only every few hundred batches, and the pinned sources filled the driver's heap (docs/daemon.md,
        # "Memory"). One collection per batch costs milliseconds next to a MERGE's seconds.
        gc.collect()
        return result

    def _write_target(self, target: str, rows: list[Row]) -> WriteResult:
        """One target's MERGE; a failure that is this table's alone (``TABLE_FAULTS``) names it (``sync.held``)."""
        try:
            return self._merge.write_target(self._tables[target], rows)
        except FatalError as err:
            text = str(err)
            if not TABLE_FAULTS.search(text) or "cancel" in text.lower():
                raise
            raise TableError(
                target,
                f"Delta table {self._tables[target].path} refused the batch's rows: {text[:600]}",
                f"make the table writable again (ALTER TABLE delta.`{self._tables[target].path}` SET TBLPROPERTIES "
                f"('delta.appendOnly' = 'false'), its files' permissions), or rebuild it (cdcsync reindex {self.name}"
                " --table ...)",
            ) from err

    def held(self, target: str) -> dict[str, tuple[int, dict[str, Any]]]:
        """Every live row: ``{doc_id: (version, doc in stored form)}``."""
        return {ident: (version, doc) for ident, version, doc in self.scan(target)}

    def scan(self, target: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Every live row, one Spark partition at a time: ``(doc_id, version, doc in stored form)`` (``Reads.scan``)."""
        yield from self._reads.scan(target, self.live)

    def digests(
        self, target: str, digest: Callable[[dict[str, Any]], bytes], where: str | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """Every live row's id and ``digest`` of its stored form, computed on the executors (``Reads.digests``)."""
        yield from self._reads.digests(target, self.live, digest, where)

    def kinds(self, target: str) -> dict[str, str | None]:
        """The target table's data columns and their kinds."""
        return dict(self._tables.table(target).kinds)

    def sums(self, target: str, bucket: str, hashed: str, aggregates: Sequence[str]) -> list[tuple[Any, ...]]:
        """The live rows' ``aggregates`` by ``bucket``, computed on the executors (``Reads.sums``)."""
        return self._reads.sums(target, self.live, bucket, hashed, aggregates)

    def lookup(self, target: str, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live rows of these ids, ``reads.LOOKUP_IDS`` ids a query: ``(doc_id, version, doc in stored form)``."""
        yield from self._reads.lookup(target, self.live, ids)

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The canonical document as ``held`` returns it (see the module docstring)."""
        return reads.stored_form(doc)

    def live(self, target: str) -> DataFrame:
        """The target's table without delete markers: what readers should query (a staged one: its spool so far)."""
        return self._reads.live(target)

    def close(self) -> None:
        """Let a log checkpoint being written finish; the Spark session belongs to the caller."""
        self._checkpoints.close()
        self._tables.clear()

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return mapped(what, self._mapped)

    @staticmethod
    def _mapped(err: Exception, what: str) -> Exception:
        """A Spark or Delta failure met during ``what`` as one of the two error roots: a commit conflict passes,
        anything else needs a person (Py4J errors carry the Java class in their text)."""
        text = f"{type(err).__name__}: {err}"
        if any(marker in text for marker in CONFLICTS):
            return RetryableError(f"{what}: Delta commit conflict, retry the batch: {text[:300]}")
        return FatalError(f"{what} failed: {text[:1000]}")
