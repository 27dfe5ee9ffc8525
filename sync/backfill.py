"""Columns the source filled without a change event, brought into every store through the log.

``ADD COLUMN ... DEFAULT`` gives every existing row the default and logs no
change for any of them (Postgres stores a constant default in the catalog;
MariaDB adds the column in place). No follower could learn those values from
the log. The follower that first learns such a column (``Follower.relearn``
while it runs, ``sync.reindex_needed.changed_while_stopped`` when it starts
after the DDL) asks capture for an incremental snapshot of the whole table,
as ``repair`` does (``connectors.signals``): Debezium reads every row again
and emits it as an ``r`` event, in order with the live changes, so every
follower of the source converges, in order, without a command.

One backfill per source table and set of columns, whichever follower asks
first: the request is recorded in ``<state>/backfill/<source>.json`` under a
lock, and a follower that learns the same columns later finds it there.

Where no signal can be sent (the source's user does not own its signal
table, or the insert fails), ``request`` says why, and the follower records
the table for a reindex from the source instead (``sync.reindex_needed``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.connectors import signals
from cdcsync.state import base_dir

log = logging.getLogger("cdcsync.backfill")


def state_file(base: Path, source: str) -> Path:
    return base / "backfill" / f"{source}.json"


def requested(config: Config, source: str) -> dict[str, dict[str, object]]:
    """The source's backfills asked for: table -> {columns, signal, at}."""
    path = state_file(base_dir(config), source)
    return json.loads(path.read_text()) if path.exists() else {}


def request(config: Config, source: SourceConfig, table: TableRef, columns: Iterable[str], follower: str) -> str | None:
    """Ask capture to read ``table`` again for ``columns`` (once per table and columns); None, or why it cannot."""
    wanted = sorted(set(columns))
    path = state_file(base_dir(config), source.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the daemon's followers learn on threads of their own
        known = requested(config, source.name)
        held = known.get(str(table))
        if held is not None and set(wanted) <= set(held["columns"]):  # type: ignore[call-overload]
            return None  # another follower asked already: its snapshot rows reach every follower
        problem = signals.signal_table_problem(source)
        if problem is not None:
            return problem
        try:
            signal = signals.request_snapshot(source, [table])
        except Exception as err:  # the source down, a user without INSERT on the signal table
            return f"the snapshot signal failed: {type(err).__name__}: {err}"
        done = sorted(set(wanted) | set(held["columns"] if held else ()))  # type: ignore[call-overload]
        known[str(table)] = {"columns": done, "signal": signal, "at": time.time()}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known, indent=2, sort_keys=True))
        os.replace(tmp, path)
    log.warning(
        "follower=%s source=%s table=%s backfill columns=%s signal=%s: the source filled them in existing rows "
        "without a change event; every row is read again through the log",
        follower, source.name, table, wanted, signal,
    )  # fmt: skip
    return None
