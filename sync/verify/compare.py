"""Compare a derived store with its source, row by row: the proof of convergence.

For each followed table, the source rows are read from the database, mapped
the way the follower maps changes, and put in the sink's stored form; the
sink's live rows are read back (``Sink.scan``). Each id is then ``missing``
(in the source, not the store), ``extra`` (in the store only) or ``stale``
(both, but the mapped values differ), compared by a digest of the values.

Memory does not grow with the table. Neither side is held: each row becomes
its id and a 16-byte digest of its fingerprint, appended to a file per side
in a temporary directory, in parts by the hash of the id
(``verify_spill``). The two sides are read at once, each on a thread of its
own, since each mostly waits for its server; a large table's source side is
read in a process of its own (``verify_process``), and a Delta table's rows
are digested by Spark's Python workers, where the table is read
(``store_pairs``). The three kinds of difference
are then found one part at a time, each part of each side read into a dict.
What stays in memory is the parts' write buffers (~130k pairs per side), one
part of each side (~1/256 of the table, split again on disk past 400,000
pairs: ~150 MiB at most), one page of the store's reader and at most
``LISTED`` ids of each kind (the counts are exact). The disk it takes is
~2 x (id + 16 bytes + ~10 bytes of pickling) per row, in the temporary
directory (``TMPDIR``).

A row that differs is looked at again by id a few times over ~15 s
(``recheck``): one the follower was still applying, or a writer changed
during the pass, is not divergence (docs/followers.md, "Rows in flight").
Every differing id is looked at, ``LISTED`` at a time, from a file of them.

A Delta table of covered types is compared by ranges of keys first,
each side summing its rows' hashes where it is stored; only the ranges that
differ go through the above (``ranged_pairs``, ``sync.verify.ranges``).

Alternatives: a key-ordered merge of two sorted reads needs both sides
sorted alike, which Elasticsearch (no sort on ``_id``) and Redis (SCAN
order) cannot give; range checksums need a store that can checksum a key
range, which only Delta can.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.errors import ConfigError
from cdcsync.sync.catalog import mappings_for, table_bytes
from cdcsync.sync.keys import readable, rows_of
from cdcsync.sync.mapping import TableMapping, canonical_doc
from cdcsync.sync.sink import Digesting, Sink, batched, declares
from cdcsync.sync.sinks import sink_class
from cdcsync.sync.verify import ranges
from cdcsync.sync.verify.process import PROCESS_BYTES, pairs_from_process
from cdcsync.sync.verify.recheck import PAUSES_S as PAUSES_S  # verify's parts, re-exported
from cdcsync.sync.verify.recheck import recheck as recheck
from cdcsync.sync.verify.report import EXAMPLES, KIND_BYTE, KINDS, LISTED
from cdcsync.sync.verify.report import TableReport as TableReport
from cdcsync.sync.verify.sides import counted, digest, look, source_pairs, store_pairs
from cdcsync.sync.verify.spill import Spill, compare_parts

SPILL_ROWS = 10_000  # rows a side reads between two looks at whether the other side failed
SIDES = ("source", "store")


def verify_follower(
    config: Config,
    follower: FollowerConfig,
    sink: Sink,
    only: str | None = None,
    pauses: Sequence[float] = PAUSES_S,
    pace: float | None = None,
    progress: Callable[[str], None] | None = None,
    ranged: bool = True,
) -> list[TableReport]:
    """Each followed table (``only`` that one, ``source.namespace.table``) compared, its moved rows re-checked.

    ``pace``: rows per second read on each side at most (the daemon's background pass), the source then
    read a page per query in key order (``source_pages``), never in one long transaction. ``progress`` gets a
    line about every ``sides.PROGRESS_S`` seconds while a side is read. ``ranged``: a table the store can sum by
    ranges of keys is compared so first (``ranged_pairs``); False: row by row, whatever the table.
    """
    followed = [f"{source.name}.{table}" for source, table in config.followed_tables(follower)]
    if only is not None and only not in followed:
        raise ConfigError([f"follower {follower.name} follows no table {only}; it follows: {', '.join(followed)}"])
    mappings = mappings_for(config, follower)
    # Only the tables verified: another table's mapping the store refuses (a table held alone) is not this pass's.
    verified = [s.topic(t) for s, t in config.followed_tables(follower) if only in (None, f"{s.name}.{t}")]
    sink.open([mappings[topic] for topic in verified])
    reports = []
    for source, table in config.followed_tables(follower):
        mapping = mappings[source.topic(table)]
        report = TableReport(follower.name, f"{source.name}.{table}", mapping.target)
        if only is not None and report.table != only:
            continue
        found = None
        if ranged and pace is None and declares(type(sink), Digesting):
            found = ranged_pairs(source, table, mapping, cast(Digesting, sink), report, progress)
        expected, held = found or both_sides(config, follower, source, table, mapping, sink, pace, progress)
        with tempfile.TemporaryDirectory(prefix="cdcsync-verify-") as tmp:
            differing = Spill(Path(tmp) / "differing")
            try:
                compare(expected, held, report, differing)
                recheck(report, partial(look, source, table, mapping, sink), pauses, differing, pace)
            finally:
                differing.close()
                for side in (expected, held):  # a side left half read (the other failed) holds its cursor open,
                    close = getattr(side, "close", None)  # and a source transaction with it, until closed
                    if close is not None:
                        close()
        if report.stale:
            report.differing = describe(source, table, mapping, sink, report.stale[:EXAMPLES])
        reports.append(report)
    return reports


def describe(
    source: SourceConfig, table: TableRef, mapping: TableMapping, sink: Sink, ids: Collection[str]
) -> dict[str, dict[str, list[Any]]]:
    """For each of ``ids`` (stale rows), each field whose stored form differs: ``[source's, store's]``, each as
    JSON has it or as its text. Empty for a row that agrees now (it moved since) or that cannot be read back."""
    if not readable(mapping):
        return {}
    there = {
        ident: sink.stored_form(canonical_doc(row, mapping)) for ident, row in rows_of(source, table, mapping, ids)
    }
    found: dict[str, dict[str, list[Any]]] = {}
    for ident, _version, held in sink.lookup(mapping.target, ids):
        expected = there.get(ident)
        if expected is None:
            continue
        fields = {
            name: [_shown(expected.get(name)), _shown(held.get(name))]
            for name in sorted(set(expected) | set(held))
            if digest({name: expected.get(name)}) != digest({name: held.get(name)})
        }
        if fields:
            found[ident] = fields
    return found


def _shown(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def both_sides(
    config: Config,
    follower: FollowerConfig,
    source: SourceConfig,
    table: TableRef,
    mapping: TableMapping,
    sink: Sink,
    pace: float | None,
    progress: Callable[[str], None] | None,
) -> tuple[Iterator[tuple[str, bytes]], Iterator[tuple[str, bytes]]]:
    """Every row of the table on each side, as its id and digest: the source's in a process of its own for a
    large table (``verify_process``), else on a thread as the store's."""
    what = f"{source.name}.{table}: source"
    if pace is None and type(sink) is sink_class(follower) and table_bytes(source, table) >= PROCESS_BYTES:
        expected = pairs_from_process(config, follower.name, source, table, mapping, what, progress is not None)
    else:
        expected = source_pairs(source, table, mapping, sink, pace, progress, what)
    held = store_pairs(sink, mapping.target, pace)
    return expected, counted(held, progress, f"{source.name}.{table}: {follower.name}")


def ranged_pairs(
    source: SourceConfig,
    table: TableRef,
    mapping: TableMapping,
    sink: Digesting,
    report: TableReport,
    progress: Callable[[str], None] | None,
) -> tuple[Iterator[tuple[str, bytes]], Iterator[tuple[str, bytes]]] | None:
    """Both sides' pairs of the rows in the ranges whose sums differ (``sync.verify.ranges``), ``report`` given
    the rows of the others; None: the table takes the row path (it has no plan, or the ranges that differ hold
    much of it: ``verify_ranges.mostly``)."""
    plan = ranges.plan(source, table, mapping, sink.kinds(mapping.target))
    if plan is None:
        return None
    start = time.monotonic()
    summed: list[ranges.Sums] = []
    errors: list[BaseException] = []

    def there() -> None:
        try:
            summed.append(ranges.source_sums(source, table, plan))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=there, name="cdcsync-verify-sums", daemon=True)
    thread.start()
    held = ranges.summed(sink.sums(mapping.target, *ranges.store_sums_sql(plan)))
    thread.join()
    if errors:
        raise errors[0]
    differ = ranges.differing(summed[0], held)
    if progress is not None:
        progress(
            f"{report.table}: {len(summed[0] | held):,} ranges of {plan.width:,} keys summed in"
            f" {time.monotonic() - start:.1f} s, {len(differ):,} differ"
        )
    if ranges.mostly(summed[0], held, differ):
        return None
    report.source_rows += ranges.rows_of(summed[0], set(differ))
    report.store_rows += ranges.rows_of(held, set(differ))
    if not differ:
        return iter(()), iter(())
    what = f"{report.table}: source, {len(differ):,} ranges"
    expected = source_pairs(source, table, mapping, sink, None, progress, what, plan.source_where(differ))
    stored = sink.digests(mapping.target, digest, plan.store_where(differ))
    return expected, counted(stored, progress, f"{report.table}: {report.follower}, {len(differ):,} ranges")


def compare(
    expected: Iterable[tuple[str, bytes]],
    held: Iterable[tuple[str, bytes]],
    report: TableReport,
    differing: Spill | None = None,
) -> None:
    """Fill ``report`` from the source's (id, digest) pairs and the store's, spilled to disk (``verify_spill``);
    ``differing`` gets every differing id with its kind's byte (``KIND_BYTE``), for ``recheck``.

    The two sides are read at once, each on a thread into a file of its own: each mostly waits for its
    server. An id met twice on one side counts once, its last digest kept (SCAN may return a Redis key twice).
    """
    with tempfile.TemporaryDirectory(prefix="cdcsync-verify-") as tmp:
        spills = {side: Spill(Path(tmp) / side) for side in SIDES}
        failed = threading.Event()  # one side failed: the other stops at its next batch
        errors: list[BaseException] = []
        # Daemon threads, not an executor's: interpreter exit joins those, and a paced pass may take hours.
        threads = [
            threading.Thread(target=_fill, args=(spills[side], rows, failed, errors), daemon=True,
                             name=f"cdcsync-verify-{side}")
            for side, rows in zip(SIDES, (expected, held), strict=True)
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            if errors:
                raise errors[0]
            listed: dict[str, list[str]] = {kind: [] for kind in KINDS}

            def found(missing: list[str], extra: list[str], stale: list[str], there: int, held: int) -> None:
                report.source_rows += there
                report.store_rows += held
                for kind, ids in zip(KINDS, (missing, extra, stale), strict=True):
                    setattr(report, f"{kind}_count", getattr(report, f"{kind}_count") + len(ids))
                    if ids:  # the first LISTED in id order, of every part so far
                        listed[kind] = sorted(listed[kind] + ids)[:LISTED]
                        if differing is not None:
                            differing.add((ident, KIND_BYTE[kind]) for ident in ids)

            compare_parts(spills["source"], spills["store"], found)
            for kind in KINDS:
                setattr(report, kind, listed[kind])
            if differing is not None:
                differing.done()
        finally:
            for spill in spills.values():
                spill.close()


def _fill(
    spill: Spill, rows: Iterable[tuple[str, bytes]], failed: threading.Event, errors: list[BaseException]
) -> None:
    """Add ``rows`` to ``spill``, a batch at a time, stopping at a batch boundary once the other side failed."""
    try:
        for batch in batched(rows, SPILL_ROWS):
            if failed.is_set():
                return
            spill.add(batch)
        spill.done()
    except BaseException as err:
        errors.append(err)
        failed.set()
    finally:
        close = getattr(rows, "close", None)  # a generator's reader (a process, a cursor) ends now, not at collection
        if close is not None:
            close()
