"""Values the log cannot carry, read again from the source by the row's key, as Debezium's reselect post-processor does.

Debezium 3.6 sends two values a Postgres table accepts otherwise than the
table holds them (docs/types.md, "Values read again from the source"):

- a ``numeric[]`` holding ``NaN`` or an infinity arrives as null, with only a
  WARN in Connect's log;
- a date before year 1 read by Debezium's snapshot (the initial one, or an
  incremental one: ``repair``, a backfill) arrives without its era: 44 BC
  as ``0044-03-15``. A streamed change carries the era.

Debezium's own ``ReselectColumnsPostProcessor`` cannot help: it converts the
value it reads again with the same converters. So the follower does it: a
change with a null ``numeric[]``, or a snapshot row of a table that holds
dates before year 1 (those rows' ids are asked of the source once a minute
at most, ``BC_TTL_S``), takes those columns' values from the row as the
source holds it now, read as ``verify`` reads it, so the two agree.

The value read is the row's current one, which may be newer than the change;
a later change of the row carries its own, so every store still converges,
as with Debezium's post-processor. A row gone from the source keeps the
change's value (its delete follows in the log). A source that cannot be
reached leaves the change's value and says so in the log: a follower does
not stop for its source, and ``verify`` names the row until it is repaired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from decimal import Decimal
from typing import Any

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.sources import kind_of
from cdcsync.sync.catalog import source_rows
from cdcsync.sync.keys import readable, rows_of
from cdcsync.sync.mapping import Row, TableMapping, canonical_doc, doc_id, scalar_text

log = logging.getLogger("cdcsync.reselect")

BC_TTL_S = 60.0  # how long a table's ids of rows with dates before year 1 are taken as they were read
BC_ROWS = 10_000  # more such rows than this: each snapshot row of the table is read again by its key instead

Reselect = Callable[[list[Row], Mapping[str, TableMapping]], list[Row]]


def reselector(config: Config, follower: FollowerConfig) -> Reselect | None:
    """The follower's reselect over its tables of kinds whose connector sends values wrong, or None (no such table)."""
    tables = {s.topic(t): (s, t) for s, t in config.followed_tables(follower) if kind_of(s).reads.reselects}
    return Reselector(tables) if tables else None


class Reselector:
    def __init__(self, tables: dict[str, tuple[SourceConfig, TableRef]]) -> None:
        self.tables = tables
        self._arrays: dict[str, tuple[float, frozenset[str]]] = {}  # topic -> (read at, its numeric[] columns)
        self._bc: dict[str, tuple[float, dict[str, dict[str, Any]] | None]] = {}  # topic -> (read at, id -> row)
        self._failed: dict[str, float] = {}  # topic -> when to ask its source again after it could not be read

    def __call__(self, rows: list[Row], mappings: Mapping[str, TableMapping]) -> list[Row]:
        by_topic: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            topic = row.change.topic
            if row.doc is not None and topic in self.tables and topic in mappings:
                by_topic.setdefault(topic, []).append(i)
        out = rows
        for topic, indexes in by_topic.items():
            if time.monotonic() < self._failed.get(topic, 0.0):
                continue
            source, table = self.tables[topic]
            mapping = mappings[topic]
            dates = [c for c, kind in mapping.types.items() if kind == "date"]
            if not dates and "array" not in mapping.types.values():  # most tables: nothing to read again
                continue
            try:
                arrays = self._numeric_arrays(topic, mapping)
                needs = {i: c for i in indexes if (c := self._columns(topic, rows[i], mapping, arrays, dates))}
                found = self._rows(topic, source, table, mapping, {rows[i].doc_id for i in needs}) if needs else {}
            except Exception as err:  # the source down: the changes' values stand, verify names the rows
                self._failed[topic] = time.monotonic() + BC_TTL_S
                log.error("table=%s could not read values again from source %s (%s); for %.0f s they stay as the "
                          "log sent them, until a repair", table, source.name, err, BC_TTL_S)  # fmt: skip
                continue
            for i, columns in needs.items():
                there = found.get(rows[i].doc_id)
                if there is None:  # gone from the source: its delete follows in the log
                    continue
                fresh, row = canonical_doc(there, mapping), rows[i]
                doc = {**(row.doc or {}), **{f: _as_logged(fresh.get(f)) for f in map(mapping.field, columns)}}
                out = list(rows) if out is rows else out
                out[i] = Row(row.change, row.target, row.doc_id, doc)
        return out

    def _columns(
        self, topic: str, row: Row, mapping: TableMapping, arrays: frozenset[str], dates: list[str]
    ) -> list[str]:
        """The columns of ``row`` whose value the log may have sent wrong: of its ``arrays`` (numeric[]) and
        ``dates``."""
        doc = row.doc or {}
        columns = [c for c in arrays if doc.get(mapping.field(c), 0) is None]
        if dates and row.change.op == "r" and row.change.partition >= 0:  # Debezium's snapshot (a copy's: -1)
            held = [c for c in dates if doc.get(mapping.field(c)) is not None]
            if held and self._bc_row(topic, mapping, row.doc_id):
                columns += held
        return columns

    def _numeric_arrays(self, topic: str, mapping: TableMapping) -> frozenset[str]:
        arrays = [c for c, kind in mapping.types.items() if kind == "array"]
        if not arrays:
            return frozenset()
        cached = self._arrays.get(topic)
        known = frozenset() if cached is None else cached[1]
        if cached is None or time.monotonic() - cached[0] > BC_TTL_S:
            source, table = self.tables[topic]
            known = kind_of(source).reads.reselected_arrays(source, table)
            self._arrays[topic] = (time.monotonic(), known)
        return known & set(arrays)

    def _bc_row(self, topic: str, mapping: TableMapping, ident: str) -> bool:
        """Whether the source row ``ident`` holds a date before year 1 (or the table holds too many to list)."""
        cached = self._bc.get(topic)
        rows = None if cached is None else cached[1]
        if cached is None or time.monotonic() - cached[0] > BC_TTL_S:
            source, table = self.tables[topic]
            dates = [c for c, kind in mapping.types.items() if kind == "date"]
            where = kind_of(source).reads.snapshot_dates_wrong(dates)
            listed: dict[str, dict[str, Any]] = {}
            if where is None:
                self._bc[topic] = (time.monotonic(), listed)
                return False
            with closing(source_rows(source, table, where)) as found:
                for row in found:
                    listed[doc_id(row, mapping)] = row
                    if len(listed) > BC_ROWS:
                        break
            rows = listed if len(listed) <= BC_ROWS else None
            self._bc[topic] = (time.monotonic(), rows)
        return rows is None or ident in rows

    def _rows(
        self, topic: str, source: SourceConfig, table: TableRef, mapping: TableMapping, ids: set[str]
    ) -> dict[str, dict[str, Any]]:
        """The source's rows of ``ids`` now: from the rows listed with dates before year 1 where they are."""
        listed = self._bc.get(topic, (0.0, None))[1] or {}
        found = {i: listed[i] for i in ids if i in listed}
        asked = ids - found.keys()
        if asked and readable(mapping):
            found.update(rows_of(source, table, mapping, sorted(asked)))
        return found


def _as_logged(value: Any) -> Any:
    """A value read from the source in the form a change maps it to: a numeric[]'s elements as their exact text,
    as Debezium sends them (``decimal.handling.mode=string``: ``1.50`` stays ``1.50``)."""
    if isinstance(value, list):
        return [scalar_text(v) if isinstance(v, Decimal) else v for v in value]
    return value
