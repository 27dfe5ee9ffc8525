"""Tables a follower cannot bring up to date by itself: recorded, shown, and named with their repair.

Some schema changes leave rows that no change event will ever fix
(docs/schema-changes.md): a RENAME COLUMN (the follower sees one column lost
and one gained in the same change; rows nobody touched since hold the value
under the old name in every sink, and in the topic) and a column added with a
value for the rows already there (a non-null DEFAULT, a generated column: the
source fills them, the log says nothing); and a column whose type changed
into another kind (int -> text: the running daemon checks the catalog every
``KIND_CHECK_S``, ``check_kinds``, since change events show no type). The topics hold the old shape too,
so only a reindex that reads the source makes them right: ``cdcsync reindex FOLLOWER
--table TABLE --from source``. And an Elasticsearch index whose configured settings
only a new index takes (shards, analysis, a field's changed mapping:
``sync.sinks.elasticsearch_index``): its rows are right, the topics hold them, so
a reindex from the topics is enough (an entry's ``origin``: "topics"; one from
the source does it too, and an entry that needs the source is never downgraded).

The follower (on the driver) records each such table in
``<state>/rebuild/<follower>.json`` (``mark``; a stored path, named before this module), logs it as an error with the
command, and sets ``cdcsync_reindex_needed{follower,table}`` (``metrics.record_reindex_needed``, which
sets its old name too); the daemon sets the gauge again from the record when it starts the follower. ``status`` and
``verify`` print ``lines``. A reindex ``--from source`` that covers the table
clears it (``clear``); any reindex clears the entries a reindex from the topics fixes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcsync import metrics
from cdcsync.config import Config
from cdcsync.state import base_dir
from cdcsync.sync import shape
from cdcsync.sync.mapping import TableMapping

if TYPE_CHECKING:
    from cdcsync.sync.follower import Follower

log = logging.getLogger("cdcsync.reindex_needed")

KIND_CHECK_S = 60.0


def state_file(base: Path, follower: str) -> Path:
    return base / "rebuild" / f"{follower}.json"


def needed(config: Config, follower: str) -> dict[str, dict[str, Any]]:
    """The follower's tables that need a reindex: table -> {reason, since, origin} (no origin: "source")."""
    path = state_file(base_dir(config), follower)
    if not path.exists():
        return {}
    tables: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return tables


def command(follower: str, table: str, origin: str = "source") -> str:
    return f"cdcsync reindex {follower} --table {table}" + (" --from source" if origin == "source" else "")


def mark(config: Config, follower: str, table: str, reason: str, origin: str = "source") -> None:
    """Record that ``table`` of ``follower`` needs a reindex (from the source by default), and say so loudly."""
    record(config, follower, table, reason, origin)
    log.error("follower=%s table=%s reindex_needed: %s; run `%s`", follower, table, reason,
              command(follower, table, origin))  # fmt: skip


def record(config: Config, follower: str, table: str, reason: str, origin: str = "source") -> None:
    """``mark`` without the log line, for a caller that says it itself; an entry that needs the source stays."""
    tables = needed(config, follower)
    held = tables.get(table)
    if origin == "topics" and held is not None and held.get("origin", "source") == "source":
        metrics.record_reindex_needed(follower, table, True)  # its reindex from the source rebuilds the index too
        return
    if held is None or (held["reason"], held.get("origin", "source")) != (reason, origin):
        tables[table] = {"reason": reason, "since": time.time(), "origin": origin}
        _write(config, follower, tables)
    metrics.record_reindex_needed(follower, table, True)


def check_kinds(config: Config, follower: Follower) -> None:
    """Mark each table of the follower whose columns the catalog now types otherwise (the daemon, every minute).

    A change events do not show: the columns are the same, their values no
    longer fit the sink's column (the sink rejects them to the dead-letter
    topic) or no longer mean the same. Only a reindex from the source, with
    the new types, makes the store right; a follower restarted before it
    refuses the table, naming the same command.
    """
    if follower.learn is None:
        return
    recorded = needed(config, follower.name)
    for topic, mapping in list(follower.mappings.items()):
        changed = shape.kind_changes(mapping, follower.learn(topic))
        if changed and mapping.table not in recorded:
            listed = ", ".join(f"{c} {was} -> {now}" for c, (was, now) in sorted(changed.items()))
            mark(
                config, follower.name, mapping.table, f"columns changed type ({listed}), which no sink widens in place"
            )


def clear(config: Config, follower: str, tables: Iterable[str] | None = None, origin: str = "source") -> None:
    """A reindex from ``origin`` covered ``tables`` (None: every table of the follower).

    From the topics, only the entries a reindex from the topics fixes go (``origin`` "topics").
    """
    recorded = needed(config, follower)
    done = set(recorded) if tables is None else set(tables) & set(recorded)
    if origin != "source":
        done = {table for table in done if recorded[table].get("origin", "source") == origin}
    for table in done:
        del recorded[table]
        metrics.record_reindex_needed(follower, table, False)
    if done:
        _write(config, follower, recorded)


def export(config: Config, follower: str) -> None:
    """Set the gauge from the record (a daemon starting the follower)."""
    for table in needed(config, follower):
        metrics.record_reindex_needed(follower, table, True)


def lines(config: Config, follower: str) -> list[str]:
    """One line per table to reindex, with the reason and the command (status, verify)."""
    return [
        f"follower {follower}: table {table} needs a reindex"
        f"{' from the source' if entry.get('origin', 'source') == 'source' else ''} ({entry['reason']}): "
        f"run `{command(follower, table, entry.get('origin', 'source'))}`"
        for table, entry in sorted(needed(config, follower).items())
    ]


def shapes_file(base: Path, follower: str) -> Path:
    return base / "shapes" / f"{follower}.json"


def remember(config: Config, follower: str, mappings: Iterable[TableMapping]) -> None:
    """Record the columns (and kinds) the follower's sink holds per table, for its next start to compare."""
    path = shapes_file(base_dir(config), follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(path.read_text()) if path.exists() else {}
    known.update({m.table: dict(m.types) for m in mappings})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=2, sort_keys=True))
    os.replace(tmp, path)


def changed_while_stopped(config: Config, follower: Follower) -> None:
    """What the source's DDL did while the follower was stopped, handled as if it had been running.

    A running follower sees a shape change in the first change after it; one
    that starts after the DDL reads the new shape from the catalog and would
    never see the difference. So the shape each table had when the follower
    last ran (``remember``) is compared with the catalog's at start: columns
    gone are forgotten by the sink in every row (a DROP), and a table that
    lost and gained columns, or gained one the source fills, is recorded for
    a reindex from the source, as ``shape.reindex_reason`` says.
    """
    path = shapes_file(base_dir(config), follower.name)
    known: dict[str, dict[str, str]] = json.loads(path.read_text()) if path.exists() else {}
    for topic, mapping in follower.mappings.items():
        before = known.get(mapping.table)
        if before is None or set(before) == set(mapping.types):
            continue
        old = replace(mapping, types=before, filled=frozenset())
        lost = frozenset(before) - frozenset(mapping.types)
        if lost:
            follower.sink.forget(mapping.target, sorted(mapping.field(c) for c in lost))
        reason = shape.reindex_reason(old, mapping, lost)
        reason = follower.backfilled(topic, reason, shape.backfilled(old, mapping, lost))
        log.info("follower=%s table=%s changed while stopped: lost=%s gained=%s", follower.name, mapping.table,
                 sorted(lost) or "none", sorted(set(mapping.types) - set(before)) or "none")  # fmt: skip
        if reason:
            mark(config, follower.name, mapping.table, f"while the follower was stopped, {reason}")
    follower.sink.settle()  # nothing writes yet: a table nobody changes loses the columns too
    remember(config, follower.name, follower.mappings.values())


def _write(config: Config, follower: str, tables: dict[str, dict[str, Any]]) -> None:
    path = state_file(base_dir(config), follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(tables, indent=2))
    os.replace(tmp, path)
