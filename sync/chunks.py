"""A follower's chunks: rows reduced to the last change per key, and the records they came from.

``Follower`` (``sync.follower``) parses a batch into chunks of rows; a chunk
keeps one row per key, and finds, for a row the sink rejected, the record to
dead-letter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from cdcsync.events import Change, Record
from cdcsync.sync.mapping import Row


def last_per_key(rows: Iterable[Row]) -> list[Row]:
    """Keep, per (source, table, key), the row with the highest version; the later offset breaks ties.

    Input order does not matter: Spark does not promise it inside a batch. The
    document id stands for the key: it is one string per key of a table.
    """
    best: dict[tuple[str, str, str], Row] = {}
    for row in rows:
        change = row.change
        ident = (change.source, change.table, row.doc_id)
        held = best.get(ident)
        if held is None or (change.version, change.partition, change.offset) > (
            held.change.version,
            held.change.partition,
            held.change.offset,
        ):
            best[ident] = row
    return list(best.values())


def finder(records: list[Record]) -> Callable[[Change], Record]:
    """change -> the record it was parsed from; the index is built on the first call (a rejected row: rare)."""
    index: dict[tuple[str, int, int], Record] = {}

    def find(change: Change) -> Record:
        if not index:
            index.update(((r.topic, r.partition, r.offset), r) for r in records)
        return index[(change.topic, change.partition, change.offset)]

    return find


# Rows to write, reduced to the last change per key, and how to find the record a rejected row came from.
Chunk = tuple[list[Row], Callable[[Change], Record]]


def snapshot_record(change: Change, doc: Any = None) -> Record:
    """A row read from the source, as the record a dead letter carries (no Kafka coordinates)."""
    value = orjson.dumps({"after": doc}, default=str) if doc is not None else None
    return Record(change.topic, -1, -1, orjson.dumps(change.key, default=str), value)
