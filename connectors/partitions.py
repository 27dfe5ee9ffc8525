"""Partitions attached to or detached from a captured Postgres table: their rows never pass through the log.

``ALTER TABLE parent ATTACH PARTITION p`` makes p's rows part of the parent
without a single INSERT in the WAL, and ``DETACH PARTITION`` takes them out
without a DELETE; a partition made by ``CREATE TABLE ... PARTITION OF`` starts
empty, and its rows stream like any other. So the capture watch
(``connectors.watch``) keeps, per source, the partitions each captured table
had when last seen (``<state>/capture/<source>.partitions.json``, by oid), and:

- **attached** (a partition not seen before): asks capture for an incremental
  snapshot of the parent limited to that partition's rows (``tableoid = <oid>``
  as the signal's ``additional-conditions``), so they reach the parent's topic
  in order with the changes around them, as an added table's do
  (``connectors.signals``). A partition made empty costs one empty query.
- **detached**: its rows stay in the followers, which no change will remove;
  this says so in the log, ``/healthz`` and ``cdcsync_capture_heals_total``,
  naming the partition and ``cdcsync verify`` to see them.

The first sight of a source records what is there: the initial snapshot read
those rows. ``connectors apply`` records too, so that a partition attached
before the daemon first runs is not taken for one seen at the start.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors import signals
from cdcsync.sources import kind_of
from cdcsync.sources.capture import Leaves
from cdcsync.state import base_dir

log = logging.getLogger(__name__)

__all__ = ["Leaves", "follow", "leaves", "remember", "state_file"]


def leaves(source: SourceConfig) -> Leaves | None:
    """Every captured partitioned table's leaf partitions now; None when the source's kind needs none followed."""
    return kind_of(source).capture.leaves(source)


def state_file(config: Config, source: SourceConfig) -> Path:
    return base_dir(config) / "capture" / f"{source.name}.partitions.json"


def remember(config: Config, source: SourceConfig, now: Leaves | None = None, only: list[str] | None = None) -> None:
    """Record the partitions the source's captured tables have now (of the tables ``only`` names, if given)."""
    now = leaves(source) if now is None else now
    if now is None:
        return
    path = state_file(config, source)
    if only is not None and path.exists():  # tables just snapshotted whole: the others keep what was seen
        now = {**json.loads(path.read_text()), **{t: now[t] for t in only if t in now}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(now, sort_keys=True))
    tmp.replace(path)


def follow(config: Config, source: SourceConfig) -> tuple[list[str], list[str]]:
    """Snapshot the rows of partitions attached since last seen: (what was done, what needs an operator)."""
    now, path = leaves(source), state_file(config, source)
    if now is None:
        return [], []
    if not path.exists():
        remember(config, source, now)
        return [], []
    before: Leaves = json.loads(path.read_text())
    done, problems = [], []
    for table in source.tables:
        had, has = before.get(str(table), {}), now.get(str(table), {})
        for oid in sorted(has.keys() - had.keys()):
            signal = signals.request_snapshot(source, [table], where=f"tableoid = {int(oid)}")
            done.append(f"partition {has[oid]} attached to {table}: its rows snapshotted (signal {signal})")
        for oid in sorted(had.keys() - has.keys()):
            problems.append(
                f"partition {had[oid]} left {table}: its rows stay in every follower, as no change removed them; "
                f'`cdcsync verify` lists them (docs/capture.md, "Partitions")'
            )
    remember(config, source, now)  # after the signals: a failed one is sent again next time
    return done, problems
