"""``cdcsync repair``: make the rows ``verify`` found different right, through the log.

A row missing from a store or stale in it is read again from the source by
capture: an ``execute-snapshot`` signal (``connectors.signals``) asks
Debezium for an incremental snapshot of its table limited to the divergent
keys (``additional-conditions``, a condition of ``sync.keys``). Debezium reads
them in chunks between a low and a high watermark and drops a chunk's row
whose key changed within the window, so each row reaches the topic once, in
order with the live changes, as an ``r`` event whose version sits at the
transaction it is emitted in (``cdcsync.events``). Every follower of the source
gets it, and a write made after it still wins; a row deleted in the source
meanwhile is not emitted (its delete streams to the stores as any other).

A signal's data must fit the signal table's column (``SIGNAL_DATA``), so
the keys go in as many signals as they need, up to ``SIGNALS_PER_TABLE``;
past that, or when the report lists fewer ids than it counts, or when the
key's ids do not read back as SQL values (``sync.keys.readable``), the
whole table is snapshotted the same way.

A row only in the store (``extra``) has no source row to read. It is
deleted from this store with its held version plus one: that beats the
version it holds, and any change the source makes to that key later has a
higher version (a later transaction), so it still wins. It is removed only
once the source is looked at again and lacks it.

Then ``repair`` waits until every repaired id agrees between source and store
(the daemon applies the snapshot rows), and verifies the tables again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.connectors import signals
from cdcsync.events import Change
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.keys import key_filter, key_parts, readable
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sink import Sink
from cdcsync.sync.verify.compare import TableReport
from cdcsync.sync.verify.sides import look

SIGNALS_PER_TABLE = 20
POLL_S = 2.0


@dataclass
class TableRepair:
    """What ``repair`` did for one table, and what is left."""

    table: str
    asked: int = 0  # missing and stale ids asked for again through the log
    signals: int = 0
    whole_table: bool = False
    removed: int = 0  # extra rows deleted from the store
    kept: list[str] = field(default_factory=list)  # extra ids not removed (see ``note``)
    note: str = ""
    waiting: list[str] = field(default_factory=list)  # ids still differing when the wait ended

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "asked": self.asked, "signals": self.signals, "whole_table": self.whole_table,
            "removed": self.removed, "kept": len(self.kept), "note": self.note, "waiting": len(self.waiting),
        }  # fmt: skip


@dataclass
class Plan:
    """One divergent table of a follower: where its rows come from and what verify found."""

    source: SourceConfig
    table: TableRef
    mapping: TableMapping
    report: TableReport

    def look(self, sink: Sink, ids: list[str]) -> dict[str, tuple[bytes | None, bytes | None]]:
        return look(self.source, self.table, self.mapping, sink, ids)


def plans(config: Config, follower: FollowerConfig, reports: list[TableReport]) -> list[Plan]:
    """The divergent tables of ``reports`` (verify's, for this follower), each with its source and mapping."""
    mappings = mappings_for(config, follower)
    divergent = {r.table: r for r in reports if r.follower == follower.name and not r.clean}
    found = []
    for source, table in config.followed_tables(follower):
        report = divergent.get(f"{source.name}.{table}")
        if report is not None:
            found.append(Plan(source, table, mappings[source.topic(table)], report))
    return found


def request(plan: Plan, sink: Sink) -> TableRepair:
    """Ask capture for the missing and stale rows again, and delete the extra ones (module docstring)."""
    report, done = plan.report, TableRepair(plan.report.table)
    again = report.missing + report.stale
    if again or report.missing_count or report.stale_count:
        done.asked = report.missing_count + report.stale_count
        wheres = _signal_filters(plan, again)
        listed_all = len(again) == done.asked
        if wheres is None or not listed_all or not readable(plan.mapping):
            done.whole_table, wheres = True, [None]
        for where in wheres:
            signals.request_snapshot(plan.source, [plan.table], where)
        done.signals = len(wheres)
    if report.extra:
        _remove_extra(plan, sink, done)
    return done


def _signal_filters(plan: Plan, ids: list[str]) -> list[str | None] | None:
    """Conditions for ``ids``, each fitting one signal, at most ``SIGNALS_PER_TABLE``; None past that, or when
    a key alone does not fit (the whole table is then snapshotted)."""
    kind, mapping = plan.source.kind, plan.mapping
    wheres: list[str | None] = []
    chunk: list[str] = []
    for ident in ids:
        wider = key_filter(kind, mapping, [*chunk, ident])
        if wider is None:
            return None
        if _fits(plan, wider):
            chunk.append(ident)
            continue
        if not chunk or len(wheres) + 1 == SIGNALS_PER_TABLE:
            return None
        wheres.append(key_filter(kind, mapping, chunk))
        chunk = [ident]
        if not _fits(plan, key_filter(kind, mapping, chunk)):
            return None
    if chunk:
        wheres.append(key_filter(kind, mapping, chunk))
    return wheres


def _fits(plan: Plan, where: str | None) -> bool:
    return len(signals.signal_data([plan.table], where)) <= signals.SIGNAL_DATA


def _remove_extra(plan: Plan, sink: Sink, done: TableRepair) -> None:
    extra = plan.report.extra
    if not readable(plan.mapping):
        done.kept = list(extra)
        done.note = "extra rows kept: this table's key cannot be looked up from its ids, so their absence is unproven"
        return
    now = plan.look(sink, extra)
    held = {ident: version for ident, version, _doc in sink.lookup(plan.mapping.target, extra)}
    gone = [i for i in extra if now[i][0] is None and i in held]  # absent from the source, still in the store
    done.kept = [i for i in extra if now[i][0] is not None]  # in the source by now: its snapshot row comes
    if done.kept:
        done.note = f"{len(done.kept)} extra rows are in the source by now: left to the log"
    rows = [_delete(plan, ident, held[ident] + 1) for ident in gone]
    if rows:
        result = sink.write(0, rows)
        sink.make_visible([plan.mapping.target])
        done.removed = result.applied


def _delete(plan: Plan, ident: str, version: int) -> Row:
    columns = plan.mapping.key_columns
    key = dict(zip(columns, key_parts(ident, len(columns)) or (), strict=False))
    change = Change(
        plan.source.name, str(plan.table), "d", key, None, None, version, plan.source.topic(plan.table), -1, -1
    )
    return Row(change, plan.mapping.target, ident, None)


def wait(plan: Plan, sink: Sink, done: TableRepair, timeout_s: float, progress: Callable[[str], None]) -> None:
    """Until every listed id agrees between source and store (the followers applied the snapshot rows)."""
    ids = sorted(plan.report.listed())
    if not readable(plan.mapping):
        return  # nothing to look up by id: the verify after the repair decides
    deadline, shown = time.monotonic() + timeout_s, 0.0
    while ids:
        now = plan.look(sink, ids)
        ids = [i for i in ids if now[i][0] != now[i][1]]
        if not ids or time.monotonic() > deadline:
            break
        if time.monotonic() - shown > 10:
            progress(f"{plan.report.follower} {plan.report.table}: {len(ids)} rows still differ")
            shown = time.monotonic()
        time.sleep(POLL_S)
    done.waiting = ids


def start(config: Config, follower: FollowerConfig, sink: Sink, reports: list[TableReport]) -> str:
    """Ask for every divergent row of ``reports`` again without waiting (the daemon's ``auto_repair``); a line.

    A follower of documents has its divergent documents rewritten from its mirror (``snapshot.documents``).
    """
    if follower.documents is not None:
        from cdcsync.snapshot.documents import repair_documents, repaired

        return "; ".join(repaired(repair_documents(config, follower, None, reports)))
    done = [request(plan, sink) for plan in plans(config, follower, reports)]
    return "; ".join(
        f"{d.table}: asked again for {d.asked} rows in {d.signals} signals, removed {d.removed} extra rows"
        + (f" ({d.note})" if d.note else "")
        for d in done
    )
