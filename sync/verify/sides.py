"""Each side of a comparison, row by row: a row's id and the digest of its stored form.

The source's rows are read through its kind (``sync.catalog``) and mapped as a
follower maps them (``canonical_doc``), then put in the store's stored form;
the store's are read as they are. ``digest`` makes equal values equal bytes
whatever the side (a null and an absent field are one value).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, TypeVar, cast

from cdcsync.config import SourceConfig, TableRef
from cdcsync.sync.catalog import source_pages, source_rows
from cdcsync.sync.keys import readable, rows_of
from cdcsync.sync.mapping import TableMapping, canonical_doc, doc_id, fingerprint_bytes
from cdcsync.sync.sink import Digesting, Sink, declares

T = TypeVar("T")
PROGRESS_S = 10.0


def source_pairs(
    source: SourceConfig,
    table: TableRef,
    mapping: TableMapping,
    sink: Sink,
    pace: float | None,
    progress: Callable[[str], None] | None,
    what: str,
    where: str | None = None,
) -> Iterator[tuple[str, bytes]]:
    """The source side: each row of the table (those matching SQL ``where``) as its id and the digest of its
    stored form (``pace``: in pages)."""
    rows = source_rows(source, table, where)
    if pace is not None and mapping.key_columns:
        rows = source_pages(source, table, mapping.key_columns)
    rows = counted(paced(rows, pace), progress, what)
    return ((doc_id(row, mapping), digest(sink.stored_form(canonical_doc(row, mapping)))) for row in rows)


def store_pairs(sink: Sink, target: str, pace: float | None) -> Iterator[tuple[str, bytes]]:
    """The store side: each live row as its id and the digest of its stored form (``pace``: rows a second at most).

    A store that can digest its rows where they are (Delta, on Spark's executors: ``digests``) does,
    unless the pass is paced: a paced pass reads a row at a time, so that it never takes the executors
    from the followers for a partition's worth of work at once.
    """
    if pace is None and declares(type(sink), Digesting):
        return cast(Digesting, sink).digests(target, digest)
    return ((ident, digest(doc)) for ident, _version, doc in paced(sink.scan(target), pace))


def counted(items: Iterable[T], progress: Callable[[str], None] | None, what: str) -> Iterator[T]:
    """``items``, with a line to ``progress`` about every ``PROGRESS_S`` seconds: how many so far, how fast."""
    if progress is None:
        yield from items
        return
    start = shown = time.monotonic()
    count = 0
    for count, item in enumerate(items, 1):
        yield item
        if count % 10_000 == 0 and time.monotonic() - shown >= PROGRESS_S:
            shown = time.monotonic()
            progress(f"{what}: {count:,} rows read ({count / (shown - start):,.0f} rows/s)")
    progress(f"{what}: {count:,} rows read in {time.monotonic() - start:.1f} s")


def paced(items: Iterable[T], per_s: float | None, every: int = 500) -> Iterator[T]:
    """``items``, at most ``per_s`` of them a second (None: as fast as they come), checked each ``every``."""
    if per_s is None:
        yield from items
        return
    start = time.monotonic()
    for count, item in enumerate(items, 1):
        yield item
        if count % every == 0:
            ahead = count / per_s - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)


def look(
    source: SourceConfig, table: TableRef, mapping: TableMapping, sink: Sink, ids: Collection[str]
) -> dict[str, tuple[bytes | None, bytes | None]]:
    """Each id's digest in the source and in the store now (None: not there), the store read after the source;
    empty when the table's key cannot be read back from its ids (``sync.keys.readable``)."""
    if not readable(mapping):
        return {}
    there = {
        ident: digest(sink.stored_form(canonical_doc(row, mapping)))
        for ident, row in rows_of(source, table, mapping, ids)
    }
    held = {ident: digest(doc) for ident, _version, doc in sink.lookup(mapping.target, ids)}
    return {ident: (there.get(ident), held.get(ident)) for ident in ids}


def digest(doc: dict[str, Any]) -> bytes:
    return hashlib.blake2b(fingerprint_bytes(_present(doc)), digest_size=16).digest()


def _present(doc: dict[str, Any]) -> dict[str, Any]:
    """A null field and an absent one are the same value: a row written before ADD COLUMN lacks the field.

    Redis and Delta store no nulls anyway; Elasticsearch keeps an explicit
    null in ``_source``, which every query treats as absent.
    """
    return {name: value for name, value in doc.items() if value is not None}
