"""The Delta sink's reads: a target's live rows (``live``), every one (``scan``), and those of some ids (``lookup``).

What ``verify`` and ``repair`` compare with the source: each row as ``(doc_id, version, doc)``, ``doc`` its
data columns read back into stored form (``delta_values``), null ones left out. Delete markers are never
returned: every read goes through ``live``, which leaves them out. A staged table holds no rows until it is
published, so ``live`` of a spooled one reads its spool (the newest row of each id, ``delta_load``).
``Reads`` reads them, through the sink's tables (``delta_tables.Tables``: their columns, spools and session).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdcsync.errors import Errors
from cdcsync.sync.sink import batched
from cdcsync.sync.sinks import delta_load as load
from cdcsync.sync.sinks.delta_tables import META, Tables
from cdcsync.sync.sinks.delta_values import read_back, read_column, stored

# The sink's own logger: what is logged here is the sink's doing, and is found under its name.
log = logging.getLogger("cdcsync.sync.sinks.delta")

# A read planned on a table that a reindex's publish (one overwrite, maybe retyping columns) replaced before
# the plan ran: Delta refuses it and asks for a new plan, which reads the new version.
REPLACED, REPLANS = "DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS", 3
LOOKUP_IDS = 1000  # ids in one lookup query's IN list
T = TypeVar("T")


# A target's live rows as a DataFrame: the sink's ``live`` (``Reads.live``, unless the sink's caller wrapped it),
# which every read goes through.
Live = Callable[[str], DataFrame]


@dataclass
class Reads:
    """A target's live rows as ``verify`` and ``repair`` read them (module docstring), each read from ``live``."""

    tables: Tables  # each target's table: its columns, its spool while staged, the Spark session
    errors: Errors
    soft_delete: bool

    def scan(self, target: str, live: Live) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Every live row, one Spark partition at a time: ``(doc_id, version, doc in stored form)``.

        Read with ``toLocalIterator``: a ``collect`` of a table of wide rows
        held all of it in the driver's heap at once, and ``verify`` of a
        Delta table of 60 KB rows ran out of it.
        """
        table = self.tables.table(target)
        columns = [read_column(name, kind) for name, kind in table.kinds.items()]
        readers = _readers(table.kinds)

        def rows() -> Iterator[tuple[str, int, dict[str, Any]]]:
            read = live(target).select("_cdcsync_id", "_cdcsync_version", *columns).toLocalIterator()
            for row in read:
                yield row[0], row[1], _stored_doc(readers, row[2:])

        yield from self._planned_again(table.path, rows)

    def digests(
        self, target: str, live: Live, digest: Callable[[dict[str, Any]], bytes], where: str | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """Every live row's id (those matching Spark SQL ``where``) and ``digest`` of its stored form, computed by
        Spark's Python workers.

        ``verify``'s store side: ``scan`` turns each row into Python objects in
        the driver, as a pickled ``Row`` of every column (~14 us a row), and a
        verify's two sides then share the driver's interpreter. Here the
        workers get each partition as Arrow batches, digest their rows (on a
        cluster, where the table's files are read), and return each batch's
        pairs as one pickled list: what reaches the driver is ~26 bytes a row,
        a few hundred rows to a message. ``digest`` must pickle by reference (a
        module's function). The next partition is read while the driver takes
        this one's pairs (``prefetchPartitions``).
        """
        table = self.tables.table(target)
        kinds = list(table.kinds.items())
        # By position: mapInArrow resolves its input's names again, and would read "a.b" as field b of a column a.
        columns = [read_column(name, kind).alias(f"c{n}") for n, (name, kind) in enumerate(kinds)]
        readers = _readers(table.kinds)

        def digested(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                ids, *values = (column.to_pylist() for column in batch.columns)
                pairs = [(ident, digest(_stored_doc(readers, row))) for ident, *row in zip(ids, *values, strict=True)]
                yield pa.RecordBatch.from_pydict({"pairs": [pickle.dumps(pairs, protocol=pickle.HIGHEST_PROTOCOL)]})

        def pairs() -> Iterator[tuple[str, bytes]]:
            rows = live(target) if where is None else live(target).where(where)
            read = rows.select("_cdcsync_id", *columns).mapInArrow(digested, "pairs binary")
            for row in read.toLocalIterator(prefetchPartitions=True):
                yield from pickle.loads(row[0])

        yield from self._planned_again(table.path, pairs)

    def sums(
        self, target: str, live: Live, bucket: str, hashed: str, aggregates: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """The live rows grouped by Spark SQL ``bucket`` (as ``b``, with ``hashed`` as ``h``): ``(b, *aggregates)``
        each, computed by the JVM on the executors (``sync.verify.ranges``)."""
        table = self.tables.table(target)
        grouped = live(target).selectExpr(f"{bucket} AS b", f"{hashed} AS h").groupBy("b")
        summed = grouped.agg(*(F.expr(aggregate) for aggregate in aggregates))
        return list(self._planned_again(table.path, lambda: iter([tuple(row) for row in summed.collect()])))

    def _planned_again(self, path: str, read: Callable[[], Iterator[T]]) -> Iterator[T]:
        """``read()``'s items; a read that a reindex's publish overtook before its first item is planned again on the
        new version, one overtaken later fails, retryable (its items so far are of the old table)."""
        attempt = 0
        while True:
            attempt += 1
            items = 0
            try:
                for item in read():
                    items += 1
                    yield item
                return
            except Exception as err:
                if REPLACED not in str(err) or attempt == REPLANS or items:
                    with self.errors(f"reading {path}"):
                        raise
                log.info("sink=%s table=%s replaced_while_read=true attempt=%d: planned again",
                         self.tables.name, path, attempt)  # fmt: skip

    def lookup(self, target: str, live: Live, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live rows of these ids, ``LOOKUP_IDS`` ids a query: ``(doc_id, version, doc in stored form)``."""
        table = self.tables.table(target)
        columns = [read_column(name, kind) for name, kind in table.kinds.items()]
        readers = _readers(table.kinds)
        for chunk in batched(ids, LOOKUP_IDS):
            with self.errors(f"reading {table.path}"):
                found = live(target).where(F.col("_cdcsync_id").isin(list(chunk)))
                rows = found.select("_cdcsync_id", "_cdcsync_version", *columns).collect()
            for row in rows:
                yield row[0], row[1], _stored_doc(readers, row[2:])

    def live(self, target: str) -> DataFrame:
        """The target's table without delete markers: what readers should query (a staged one: its spool so far)."""
        table = self.tables.table(target)
        spool = self.tables.spools.get(table.path)
        if spool is not None and spool.files():
            rows = load.newest(self.tables.spark, spool.where, META, table.kinds, self.soft_delete)
        else:
            rows = self.tables.spark.read.format("delta").load(table.path)
        return rows.where(~F.col("_cdcsync_deleted"))


Readers = list[tuple[str, Callable[[Any], Any] | None]]


def _readers(kinds: dict[str, str | None]) -> Readers:
    """Each column's name and its ``read_back`` (None: the value as read is its stored form)."""
    return [(name, read_back(kind)) for name, kind in kinds.items()]


def _stored_doc(readers: Readers, values: Iterable[Any]) -> dict[str, Any]:
    """One row's column values, as read, as its document in stored form (null columns left out): what
    ``scan``, ``lookup`` and ``digests`` all give, so that their rows compare."""
    return {
        name: value if read is None else read(value)
        for (name, read), value in zip(readers, values, strict=True)
        if value is not None
    }


def stored_form(doc: dict[str, Any]) -> dict[str, Any]:
    """The canonical document as ``held`` returns it (see the module docstring)."""
    return {field: stored(value) for field, value in doc.items() if value is not None}
