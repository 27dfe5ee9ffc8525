"""One table, one failure domain: a table whose changes cannot be applied is held alone, named, and retried.

A sink that fails for one table's rows alone (an Elasticsearch index closed
or write-blocked, a Delta table it cannot write) used to fail every
batch of the follower, so every other table of it stopped too. Now the sink
raises ``TableError`` naming the target; once the follower's attempts are
spent (``sink_attempts``), the follower sets that table's rows aside for the
rest of the batch and goes on with the others (``Follower`` counts them as
``held``). After the batch, the table is recorded here with where its first
change not applied stands (``since``: the batch's start offsets for its
topic), its reason and its fix, in ``<state>/held/<follower>.json``.

From then on the follower's batches leave the table's topic out (the others'
positions move on, and so does the query's, which is why ``since`` is kept
here), and every ``RETRY_S`` the next batch first replays the held range,
from ``since`` to its own start, on the driver (``sync.batch_reader``). Still
failing: the table stays held, ``since`` unchanged. Applied: the table is
released and that batch takes its records with the others', so it resumes
exactly where it stopped; nothing is read twice that matters (the apply rule
makes a replayed change a no-op) and nothing is skipped.

A held table is named at ``/healthz`` and by ``cdcsync status``, and
``cdcsync_table_held{follower,table}`` is 1 (alert ``CdcsyncTableHeld``).
A table the sink refuses when the follower starts (``open``: its store
no longer fits it, e.g. a column that changed type, before its reindex)
is held the same way (``open_tables``), from the first batch's start; its
retry opens it again before replaying. A failure the sink does not tie to
one target (the server down, a connection refused) is no table's: the batch fails and the follower restarts
as before. A whole server refusing every index (a disk flood stage marks
each index read-only) holds each table it meets, and releases each when the
block is lifted.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcsync import metrics
from cdcsync.config import Config
from cdcsync.errors import TableError
from cdcsync.state import base_dir
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.position import Positions

if TYPE_CHECKING:
    from cdcsync.sync.follower import Follower
    from cdcsync.sync.mapping import TableMapping
    from cdcsync.sync.sink import Sink

log = logging.getLogger("cdcsync.held")

RETRY_S = 60.0  # a held table's range is tried again this long after its last try


def state_file(base: Path, follower: str) -> Path:
    return base / "held" / f"{follower}.json"


def holding(config: Config, follower: str) -> dict[str, dict[str, Any]]:
    """The follower's held tables: topic -> {table, reason, fix, since {partition: offset}, held_at, tried_at}."""
    path = state_file(base_dir(config), follower)
    if not path.exists():
        return {}
    entries: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return entries


def _write(config: Config, follower: str, entries: dict[str, dict[str, Any]]) -> None:
    path = state_file(base_dir(config), follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(entries, indent=2, sort_keys=True))
    os.replace(partial, path)  # written whole before the batch that held it commits its offsets


def hold(config: Config, follower: str, topic: str, table: str, reason: str, fix: str, since: dict[int, int]) -> None:
    """Record ``table`` as held from ``since`` (an existing hold keeps its own ``since``), and say so loudly."""
    entries = holding(config, follower)
    now = time.time()
    entry = entries.get(topic)
    if entry is None:
        entry = {"table": table, "since": {str(p): o for p, o in since.items()}, "held_at": now}
        log.error("follower=%s table=%s held: %s; fix: %s; the follower goes on with its other tables",
                  follower, table, reason, fix)  # fmt: skip
    entry.update(reason=reason, fix=fix, tried_at=now)
    entries[topic] = entry
    _write(config, follower, entries)
    metrics.TABLE_HELD.labels(follower, table).set(1)


def open_tables(config: Config, follower: str, sink: Sink, mappings: dict[str, TableMapping]) -> None:
    """Open ``sink`` for the follower's tables; one it refuses alone (``TableError``) is held, the others open.

    After a refusal each table is opened alone, to find the ones refused. A
    ``FatalError`` is no one table's (a wrong password, a template the
    server refuses): it is raised, and the follower does not start. A table
    an earlier start held that opens now is tried at the first batch, not a
    minute later.
    """
    refused: dict[str, TableError] = {}
    try:
        sink.open(list(mappings.values()))
    except TableError:
        for topic, mapping in mappings.items():
            try:
                sink.open([mapping])
            except TableError as one:
                refused[topic] = one
    entries, now = holding(config, follower), time.time()
    for topic, err in refused.items():
        table = mappings[topic].table
        if topic not in entries:
            log.error("follower=%s table=%s held: its sink refused it at start: %s; fix: %s; the follower starts "
                      "without it", follower, table, err, err.fix)  # fmt: skip
        entry = entries.setdefault(topic, {"table": table, "since": {}, "held_at": now})  # since: the first batch's
        entry.update(reason=f"sink {sink.name} refused table {table} at the follower's start: {err}",
                     fix=err.fix, tried_at=now, reopen=True)  # fmt: skip
        metrics.TABLE_HELD.labels(follower, table).set(1)
    for topic, entry in entries.items():
        if entry.get("reopen") and topic not in refused:  # opened now: fixed while stopped, so tried at once
            entry.update(reopen=False, tried_at=0)
    if entries:
        _write(config, follower, entries)


def _reopened(config: Config, follower: Follower, topic: str, entry: dict[str, Any]) -> bool:
    """Whether a table held at the follower's start opens now; its record updated either way."""
    try:
        follower.sink.open([follower.mappings[topic]])
    except TableError as err:
        since = {int(p): o for p, o in entry["since"].items()}
        hold(config, follower.name, topic, entry["table"], f"sink {follower.sink.name} still refuses it: {err}",
             entry["fix"], since)  # fmt: skip
        return False
    entries = holding(config, follower.name)
    entries[topic]["reopen"] = False
    _write(config, follower.name, entries)
    return True


def release(config: Config, follower: str, topic: str) -> None:
    entries = holding(config, follower)
    entry = entries.pop(topic, None)
    if entry is None:
        return
    _write(config, follower, entries)
    metrics.TABLE_HELD.labels(follower, entry["table"]).set(0)
    log.warning("follower=%s table=%s released: its held changes applied, it goes on with the others",
                follower, entry["table"])  # fmt: skip


def export(config: Config, follower: str) -> None:
    """Set the gauge from the record (a daemon starting after an earlier run held a table)."""
    for entry in holding(config, follower).values():
        metrics.TABLE_HELD.labels(follower, entry["table"]).set(1)


def lines(config: Config, follower: str) -> list[str]:
    """One line per held table, for /healthz and ``cdcsync status``."""
    return [
        f"follower {follower} holds table {e['table']} since {_when(e['held_at'])} (its other tables go on): "
        f"{e['reason']}; fix: {e['fix']}; tried again every {RETRY_S:.0f} s"
        for e in holding(config, follower).values()
    ]


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))


Replay = Callable[[dict[str, dict[int, int]], dict[str, dict[int, int]]], BatchCounts]


def before_batch(config: Config, follower: Follower, start: Positions, replay: Replay) -> set[str]:
    """The topics this batch leaves out: the held ones, once any whose retry is due has been tried.

    A due table's held range (``since`` up to this batch's ``start``) is
    applied first by ``replay(start, end)``; if it applies, the table is released and
    this batch reads it with the others.
    """
    out: set[str] = set()
    now = time.time()
    entries = holding(config, follower.name)
    for topic, entry in entries.items():
        if not entry["since"] and topic in start:  # held at the start (open_tables): from this batch's start
            entry["since"] = {str(p): o for p, o in start[topic].items()}
            _write(config, follower.name, entries)
        if topic not in start or now - entry.get("tried_at", 0) < RETRY_S:
            out.add(topic)
            continue
        if entry.get("reopen") and not _reopened(config, follower, topic, entry):
            out.add(topic)
            continue
        since = {int(p): o for p, o in entry["since"].items()}
        counts = replay({topic: {p: since.get(p, -2) for p in start[topic]}}, {topic: start[topic]})
        if topic in counts.held_tables:
            reason, fix = counts.held_tables[topic]
            hold(config, follower.name, topic, entry["table"], reason, fix, since)
            out.add(topic)
        else:
            release(config, follower.name, topic)
    follower.left_out = out
    return out


def hold_refused(config: Config, follower: Follower, topic: str, err: TableError, start: Positions) -> None:
    """Hold ``topic``'s table from this batch's start: the driver's sink refused its new shape (``relearn``)."""
    hold(config, follower.name, topic, _table(follower, topic), str(err), err.fix, start.get(topic, {}))


def after_batch(config: Config, follower: Follower, counts: BatchCounts, start: Positions) -> None:
    """Record the tables this batch held, from its start (their first change not applied)."""
    for topic, (reason, fix) in counts.held_tables.items():
        hold(config, follower.name, topic, _table(follower, topic), reason, fix, start.get(topic, {}))


def _table(follower: Follower, topic: str) -> str:
    return follower.mappings[topic].table if topic in follower.mappings else topic
