"""The daemon's background verification: each table of each follower compared with its source, paced.

A divergence no change event will fix (a placeholder value written, a
partition's changes lost, an operator's stray write into a store) sits in a
store with every other status green until someone runs ``verify``. So the
daemon runs it itself, a table at a time, on a thread of its own (a daemon
``Round``):

- a table's pass starts at most every ``verify.period_s`` (3600 s), the
  first ``FIRST_PASS_S`` after the daemon starts (the followers catch up
  first); it reads ``verify.rows_per_s`` rows a second on each side (800),
  the source a page per query in key order, never in one long transaction;
- at its end, ``cdcsync_verify_divergent_rows{follower,table}`` and
  ``cdcsync_verify_last_pass_timestamp_seconds`` are set, and the report is
  written to ``<state>/verify/<follower>.json``, which ``status`` and the lag
  page read and which holds the pass times across a restart;
- with ``verify.auto_repair``, what a pass found goes to ``repair`` (a
  callable from ``cdcsync run``: ``snapshot.repair``, which asks capture for
  the rows again, or rewrites a follower's documents from its mirror); the
  next pass shows whether it worked.

Rows in flight are not divergence: each pass re-checks what differs
(``sync.verify.recheck``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcsync import metrics
from cdcsync.config import Config, FollowerConfig
from cdcsync.state import base_dir, write_private
from cdcsync.sync.documents.tree import document_of, unit
from cdcsync.sync.documents.verify import verify_documents
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.verify.compare import TableReport, verify_follower

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("cdcsync.verify")

TICK_S = 30.0  # how often the round looks for a table whose pass is due
FIRST_PASS_S = 300.0  # after the daemon starts, before a table's first pass (unless one ended within its period)
Repair = Callable[[FollowerConfig, Any, list[TableReport]], str]  # (follower, sink, reports) -> what it did


def results_file(config: Config, follower: str) -> Path:
    return base_dir(config) / "verify" / f"{follower}.json"


def last_results(config: Config, follower: str) -> dict[str, dict[str, Any]]:
    """The last complete pass of each table of ``follower``: table -> report (``as_dict``) with ``started_at``
    and ``ended_at``; empty before the first."""
    path = results_file(config, follower)
    try:
        data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def divergent(result: dict[str, Any]) -> int:
    return int(result.get("missing_count", 0) + result.get("stale_count", 0) + result.get("extra_count", 0))


class BackgroundVerify:
    """``tick``: run every pass that is due, one table at a time (a daemon ``Round`` of ``TICK_S``)."""

    def __init__(
        self, config: Config, followers: list[FollowerConfig], spark: SparkSession | None, repair: Repair | None
    ) -> None:
        self.config, self.spark, self.repair = config, spark, repair
        self.followers = [f for f in followers if f.verify.enabled]
        self.started = time.time()
        for follower in self.followers:
            metrics.VERIFY_PERIOD.labels(follower.name).set(follower.verify.period_s)
            for table, result in last_results(config, follower.name).items():
                _export(follower.name, table, result)

    @property
    def every_s(self) -> float:
        """How often the round looks for a due pass: ``TICK_S``, or half the shortest period."""
        return min([TICK_S, *(f.verify.period_s / 2 for f in self.followers)])

    def due(self, follower: FollowerConfig, table: str, now: float) -> bool:
        last = last_results(self.config, follower.name).get(table)
        if last is None:
            return now - self.started >= min(FIRST_PASS_S, follower.verify.period_s)
        return now - float(last["started_at"]) >= follower.verify.period_s

    def tick(self) -> None:
        for follower in self.followers:
            for name in self.verified(follower):
                if self.due(follower, name, time.time()):
                    self.run_pass(follower, name)

    def verified(self, follower: FollowerConfig) -> list[str]:
        """What a pass compares, one at a time: each table (``source.namespace.table``), or each document."""
        if follower.documents is not None:
            return [unit(name) for name in follower.documents]
        return [f"{source.name}.{table}" for source, table in self.config.followed_tables(follower)]

    def run_pass(self, follower: FollowerConfig, table: str) -> TableReport:
        """One paced pass over one table; its result exported, recorded and, if allowed, repaired."""
        started = time.time()
        log.info("follower=%s table=%s pass started at %d rows/s", follower.name, table, follower.verify.rows_per_s)
        sink = build_sink(self.config, follower, self.spark)
        try:
            if follower.documents is not None:
                document = document_of(table)
                (report,) = verify_documents(self.config, follower, sink, document, pace=follower.verify.rows_per_s)
            else:
                (report,) = verify_follower(self.config, follower, sink, only=table, pace=follower.verify.rows_per_s)
            result = {**report.as_dict(), "started_at": started, "ended_at": time.time()}
            self._record(follower, table, result)
            log.info(
                "follower=%s table=%s pass ended in %.0f s: source=%d store=%d missing=%d stale=%d extra=%d",
                follower.name, table, result["ended_at"] - started, report.source_rows, report.store_rows,
                report.missing_count, report.stale_count, report.extra_count,
            )  # fmt: skip
            if not report.clean and follower.verify.auto_repair and self.repair is not None:
                log.warning("follower=%s table=%s auto_repair: %s", follower.name, table,
                            self.repair(follower, sink, [report]))  # fmt: skip
        finally:
            sink.close()
        return report

    def _record(self, follower: FollowerConfig, table: str, result: dict[str, Any]) -> None:
        results = last_results(self.config, follower.name)
        results[table] = result
        write_private(results_file(self.config, follower.name), json.dumps(results, indent=2))
        _export(follower.name, table, result)


def _export(follower: str, table: str, result: dict[str, Any]) -> None:
    metrics.VERIFY_DIVERGENT.labels(follower, table).set(divergent(result))
    metrics.VERIFY_LAST_PASS.labels(follower, table).set(float(result["ended_at"]))
