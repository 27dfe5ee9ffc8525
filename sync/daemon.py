"""The daemon: every follower's streaming query under one supervisor, its background rounds, health and signals.

``cdcsync run`` builds one ``Daemon`` and calls ``run``. What the daemon
needs from the layers above it comes in as plain callables, so that this
module, like all of ``sync/``, imports nothing of ``connectors/`` or
``snapshot/``:

- ``prepare(follower)``: what must be done before a follower starts, each
  time it starts (``cdcsync run``: finish a reindex killed after its switch);
  it returns a line for the log, or None;
- ``rounds``: background jobs, each run every ``every_s`` seconds on a thread
  of its own (``cdcsync run``: the capture watchdog and the lag collector),
  whose ``health``, if it has one, joins the followers' at /healthz.

A round that fails is logged and tried again at its next turn: a thread that
died would stop healing or exporting, silently. The daemon has rounds of its
own: one checks the catalog for columns whose type changed kind
(``sync.reindex_needed``), one removes delete markers older than the
compaction horizon (``sync.marker_purge``) for the followers whose sink can,
and one keeps the Delta tables compact and vacuumed (``sync.delta_upkeep``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcsync import lagpage, metrics, systemd
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import CdcsyncError
from cdcsync.sync import deadline, held, reindex_needed
from cdcsync.sync.build import build_follower
from cdcsync.sync.delta_upkeep import Upkeep
from cdcsync.sync.marker_purge import MarkerPurge
from cdcsync.sync.position import check_position
from cdcsync.sync.stream import checkpoint_dir, present_topics, start_query
from cdcsync.sync.supervisor import Relaunch, Stuck, Supervisor

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcsync.sync.follower import Follower

log = logging.getLogger("cdcsync.run")

Health = tuple[bool, list[str]]  # all well, and each problem in a line
Prepare = Callable[[FollowerConfig], "str | None"]
STOP_TIMEOUT_S = 30.0  # how long a stop waits for the batch running to end


@dataclass(frozen=True)
class Round:
    """A background job of the daemon: ``tick`` every ``every_s`` seconds; ``health`` joins /healthz."""

    name: str  # its thread's and its log's name
    tick: Callable[[], object]
    every_s: float
    health: Callable[[], Health] | None = None
    first_after_s: float = 0.0  # its first turn waits this long (work that need not slow the daemon's start)


def run_once(config: Config, followers: list[FollowerConfig], spark: SparkSession, prepare: Prepare) -> int:
    """Apply everything in the log up to now for each follower, all at once; 0, or 1 when a query failed."""
    queries = []
    for cfg in followers:
        _log_prepared(cfg, prepare)
        queries.append(start_query(spark, config, cfg, build_follower(config, cfg, spark), once=True))
    failed = False
    for cfg, query in zip(followers, queries, strict=True):
        while not query.awaitTermination(1):
            overdue = deadline.overdue(cfg.name)
            if overdue is not None:  # no batch waits forever (sync.deadline), here neither
                log.error("follower=%s %s", cfg.name, overdue)
                query.stop()
                failed = True
        if query.exception() is not None:
            failed = True
            log.error("query=%s failed: %s", query.name, query.exception())
    return 1 if failed else 0


class Daemon:
    """The followers ``followers`` of ``config``, run until a signal or until every one has stopped for good."""

    def __init__(
        self,
        config: Config,
        followers: list[FollowerConfig],
        spark: SparkSession,
        prepare: Prepare,
        rounds: list[Round],
    ) -> None:
        self.config, self.followers, self.spark = config, followers, spark
        self.prepare = prepare
        self.built: dict[str, Follower] = {}  # follower name -> its Follower, closed when it is rebuilt
        self.supervisor = Supervisor(followers, self._start, check=self._check)
        self.rounds = [*rounds, Round("cdcsync.reindex_needed", self._check_kinds, reindex_needed.KIND_CHECK_S)]
        self.purge = MarkerPurge(config, followers)
        if self.purge.followers:
            self.rounds.append(Round("cdcsync.purge", self.purge.tick, self.purge.every_s))
        self.upkeep = Upkeep(config, followers, spark)
        if self.upkeep.enabled:
            every = self.upkeep.every_s  # not at the start: the followers' first batches come first
            self.rounds.append(Round("cdcsync.upkeep", self.upkeep.tick, every, first_after_s=min(every, 600.0)))

    def health(self) -> Health:
        ok, problems = self.supervisor.health()
        for cfg in self.followers:  # a table held alone (sync.held): the follower runs, that table does not
            lines = held.lines(self.config, cfg.name)
            ok, problems = ok and not lines, problems + lines
        for each in self.rounds:
            if each.health is not None:
                round_ok, round_problems = each.health()
                ok, problems = ok and round_ok, problems + round_problems
        return ok, problems

    def serve(self, port: int, host: str) -> None:
        """/metrics, /healthz and the lag page on ``host:port``."""
        metrics.serve(port, host, health=self.health, pages=lagpage.pages(self.health))
        log.info("metrics on http://%s:%d/metrics, health on /healthz", host, port)

    def run(self) -> int:
        """Start every follower and the rounds; 0 after SIGTERM/SIGINT, 1 when every follower has stopped for good.

        When the Spark driver's JVM dies (an OutOfMemoryError ends it), the
        process exits 1 at once, for the service manager to restart it.
        """
        from py4j.protocol import Py4JError

        for each in self.rounds:
            threading.Thread(target=_repeat, args=(each,), name=each.name, daemon=True).start()
        stopping: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
        signal.signal(signal.SIGINT, lambda signum, _frame: stopping.append(signum))
        self.supervisor.start_all()
        systemd.notify("READY=1")  # Type=notify: started, serving /metrics (deploy/systemd)
        watchdog = systemd.Watchdog()
        while not stopping:
            watchdog.pet()  # only from this loop: a loop that hangs is restarted by systemd
            try:
                self.supervisor.tick()
            except Stuck as err:  # a cancelled batch the JVM cannot free: only a new process frees its thread
                log.critical("%s: exiting 1 for the service manager to restart the daemon", err)
                os._exit(1)
            except (Py4JError, ConnectionError) as err:  # the driver JVM is gone
                log.critical(
                    "the Spark driver JVM died (%s): every follower stops; exiting 1 for the service manager to "
                    "restart the daemon. If it was out of heap, see docs/daemon.md, Memory "
                    "(spark.driver_memory)",
                    str(err).splitlines()[0],
                )
                os._exit(1)  # not sys.exit: Spark's shutdown hooks would wait on the dead JVM
            if self.supervisor.all_stopped():
                log.error("every follower has stopped for good: %s", "; ".join(self.supervisor.health()[1]))
                return 1
            time.sleep(0.5)
        log.info("signal %d: stopping %d followers between batches", stopping[0], len(self.followers))
        systemd.notify("STOPPING=1")
        self.supervisor.stop_all(stop_between_batches)
        for follower in self.built.values():  # before Spark's own shutdown: a sink may still be writing
            _close_quietly(follower)
        return 0

    def _start(self, follower: FollowerConfig) -> tuple[Any, list[str]]:
        old = self.built.pop(follower.name, None)
        if old is not None:
            _close_quietly(old)
        _log_prepared(follower, self.prepare)
        for line in reindex_needed.lines(self.config, follower.name):  # recorded by an earlier run: still to do
            log.error("%s", line)
        reindex_needed.export(self.config, follower.name)
        held.export(self.config, follower.name)
        running = build_follower(self.config, follower, self.spark)
        self.built[follower.name] = running
        query = start_query(self.spark, self.config, follower, running)
        log.info("follower=%s started topics=%d checkpoint=%s", follower.name, len(running.mappings),
                 checkpoint_dir(self.config, follower))  # fmt: skip
        return query, present_topics(self.config, sorted(running.mappings))

    def use(self, config: Config) -> None:
        """Follow what ``config`` says from now on: tables captured since the start (connectors.discover)."""
        self.config = self.purge.config = self.upkeep.config = config

    def _check(self, follower: FollowerConfig, topics: list[str]) -> None:
        check_position(self.config, follower, topics)
        running = self.built.get(follower.name)
        if running is None:
            return
        captured = sorted({s.topic(t) for s, t in self.config.followed_tables(follower)} - set(running.mappings))
        if captured:  # tables a source's patterns matched since it started (connectors.discover.TableWatch)
            raise Relaunch(f"now following {captured} as well: captured since")
        waiting = sorted(set(running.mappings) - set(topics))
        appeared = present_topics(self.config, waiting) if waiting else []
        if appeared:  # a table added to it, whose connector has been applied since
            raise Relaunch(f"now following {appeared} as well")

    def _check_kinds(self) -> None:
        """Columns whose type changed kind in the catalog (``reindex_needed.check_kinds``), follower by follower."""
        for follower in list(self.built.values()):
            try:
                reindex_needed.check_kinds(self.config, follower)
            except Exception as err:  # a source down for a round: the next one asks again
                log.warning("follower=%s kinds not checked: %s", follower.name, err)


def _repeat(each: Round) -> None:
    time.sleep(each.first_after_s)
    while True:
        try:
            each.tick()
        except Exception as err:  # the round outlives any one turn: a thread that died would do nothing, silently
            logging.getLogger(each.name).warning(
                "round failed; the next one tries again: %s", err, exc_info=not isinstance(err, CdcsyncError | OSError)
            )
        time.sleep(each.every_s)


def _log_prepared(follower: FollowerConfig, prepare: Prepare) -> None:
    done = prepare(follower)
    if done:
        log.warning("follower=%s %s", follower.name, done)


def _close_quietly(follower: Follower) -> None:
    try:
        follower.sink.close()
    except Exception as err:  # a sink that failed may fail to close too; the rebuilt one replaces it
        log.warning("follower=%s closing its sink: %s", follower.name, err)


def stop_between_batches(query: Any, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop a query when no batch is running, or after ``timeout_s`` anyway (catching up, a batch follows a batch).

    A batch cut short is replayed at the next start (its offsets were not committed): nothing is lost.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.status.get("isTriggerActive"):
        time.sleep(0.1)
    query.stop()
