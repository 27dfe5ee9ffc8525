"""``cdcsync run``: the daemon, one streaming query per follower."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import click

from cdcsync.cli import load


@click.command("run")
@click.argument("followers", nargs=-1)
@click.option("--once", is_flag=True, help="Apply everything in the log up to now, then exit (no daemon).")
@click.option(
    "--metrics-port",
    type=int,
    default=19400,
    envvar="CDCSYNC_METRICS_PORT",
    show_envvar=True,
    help="Port for /metrics (daemon only); 0 disables it.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    envvar="CDCSYNC_METRICS_HOST",
    show_envvar=True,
    help="Address /metrics and /healthz listen on (loopback unless set).",
)
@click.option(
    "--master",
    envvar="CDCSYNC_SPARK_MASTER",
    show_envvar=True,
    default=None,
    help="Spark master URL [default: local[2 x cores + 1,4]: a failed task is tried up to 4 times].",
)
@click.option(
    "--capture-watch/--no-capture-watch",
    default=True,
    show_default=True,
    help="Watch the sources' connectors: restart FAILED tasks, heal stalled capture (connectors.watch).",
)
@click.pass_context
def run(
    ctx: click.Context,
    followers: tuple[str, ...],
    once: bool,
    metrics_port: int,
    metrics_host: str,
    master: str | None,
    capture_watch: bool,
) -> None:
    """Run the followers (all configured ones by default) until stopped.

    Each follower is its own Spark Structured Streaming query with its own
    checkpoint; a restart resumes where it stopped. Followers fail alone: a
    failed one is restarted with a growing back-off while the others keep
    going, and one a restart cannot fix (bad config, a position past the
    compaction horizon, a reindex killed during its switch: run ``reindex``)
    is stopped alone, with the reason
    in the log, in the metrics and at /healthz (``sync.supervisor``).

    Exit 0 after SIGTERM/SIGINT (queries stopped between batches), 1 when
    every follower has stopped for good, 2 for a usage or config error.
    """
    from py4j.protocol import Py4JError

    from cdcsync import lagpage, metrics
    from cdcsync.connectors.watch import CaptureWatch
    from cdcsync.snapshot.reindex import finish_killed
    from cdcsync.spark import spark_session
    from cdcsync.sync import rebuild
    from cdcsync.sync.position import check_position
    from cdcsync.sync.stream import build_follower, checkpoint_dir, present_topics, start_query
    from cdcsync.sync.supervisor import Relaunch, Supervisor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "elastic_transport"):  # a line per request is not the daemon's news
        logging.getLogger(noisy).setLevel(logging.WARNING)
    log = logging.getLogger("cdcsync.run")
    config = load(ctx)
    log.info("effective config %s", json.dumps(config.redacted()))
    selected = [config.follower(n) for n in followers] or list(config.followers)
    if not selected:
        raise click.UsageError("no followers configured")
    spark = spark_session("cdcsync", master)
    if once:
        queries = []
        for cfg in selected:
            finished = finish_killed(config, cfg, spark)
            if finished:
                log.warning("follower=%s %s", cfg.name, finished)
            follower = build_follower(config, cfg, spark)
            queries.append(start_query(spark, config, cfg, follower, once=True))
        failed = False
        for query in queries:
            query.awaitTermination()
            if query.exception() is not None:
                failed = True
                log.error("query=%s failed: %s", query.name, query.exception())
        spark.stop()
        ctx.exit(1 if failed else 0)

    built: dict[str, Any] = {}  # follower name -> its Follower, closed when it is rebuilt

    def start(cfg: Any) -> tuple[Any, list[str]]:
        old = built.pop(cfg.name, None)
        if old is not None:
            _close_quietly(old)
        finished = finish_killed(config, cfg, spark)  # a reindex killed after its switch left a window out
        if finished:
            log.warning("follower=%s %s", cfg.name, finished)
        for line in rebuild.lines(config, cfg.name):  # recorded by an earlier run: still to do
            log.error("%s", line)
        rebuild.export(config, cfg.name)
        follower = build_follower(config, cfg, spark)
        built[cfg.name] = follower
        query = start_query(spark, config, cfg, follower)
        log.info("follower=%s started topics=%d checkpoint=%s", cfg.name, len(follower.mappings),
                 checkpoint_dir(config, cfg))  # fmt: skip
        return query, present_topics(config, sorted(follower.mappings))

    def check(cfg: Any, topics: list[str]) -> None:
        check_position(config, cfg, topics)
        follower = built.get(cfg.name)
        waiting = sorted(set(follower.mappings) - set(topics)) if follower is not None else []
        appeared = present_topics(config, waiting) if waiting else []
        if appeared:  # a table added to it, whose connector has been applied since
            raise Relaunch(f"now following {appeared} as well")

    supervisor = Supervisor(selected, start, check=check)
    watch = CaptureWatch(config) if capture_watch and config.sources else None
    if watch is not None:
        threading.Thread(target=_watch_capture, args=(watch,), name="cdcsync-capture-watch", daemon=True).start()
    threading.Thread(target=_watch_kinds, args=(config, built), name="cdcsync-kind-watch", daemon=True).start()

    def health() -> tuple[bool, list[str]]:
        ok, problems = supervisor.health()
        if watch is not None:
            capture_ok, capture_problems = watch.health()
            ok, problems = ok and capture_ok, problems + capture_problems
        return ok, problems

    if metrics_port:
        metrics.serve(metrics_port, metrics_host, health=health, pages=lagpage.pages(health))
        log.info("metrics on http://%s:%d/metrics, health on /healthz", metrics_host, metrics_port)
        threading.Thread(target=_collect_lag, args=(config, selected), name="cdcsync-lag", daemon=True).start()
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: stopping.append(signum))
    supervisor.start_all()
    while not stopping:
        try:
            supervisor.tick()
        except (Py4JError, ConnectionError) as err:  # the driver JVM is gone (an OutOfMemoryError ends it)
            log.critical(
                "the Spark driver JVM died (%s): every follower stops; exiting 1 for the service manager to restart "
                "the daemon. If it was out of heap, see docs/daemon.md, Memory (CDCSYNC_SPARK_DRIVER_MEMORY)",
                str(err).splitlines()[0],
            )
            os._exit(1)  # not ctx.exit: Spark's shutdown hooks would wait on the dead JVM
        if supervisor.all_stopped():
            log.error("every follower has stopped for good: %s", "; ".join(supervisor.health()[1]))
            ctx.exit(1)
        time.sleep(0.5)
    log.info("signal %d: stopping %d followers between batches", stopping[0], len(selected))
    supervisor.stop_all(stop_between_batches)
    for follower in built.values():  # before Spark's own shutdown: a sink may still be writing (a Delta checkpoint)
        _close_quietly(follower)
    ctx.exit(0)


def _watch_capture(watch: Any) -> None:
    from cdcsync.connectors.watch import WATCH_S

    while True:
        try:
            watch.tick()
        except Exception:  # the watchdog outlives any one round: a thread that died would heal nothing, silently
            logging.getLogger("cdcsync.capture").exception("capture watch round failed; the next one tries again")
        time.sleep(WATCH_S)


def _watch_kinds(config: Any, built: dict[str, Any]) -> None:
    """Every ``KIND_CHECK_S``: columns whose type changed kind in the catalog (``sync.rebuild.check_kinds``)."""
    from cdcsync.sync.rebuild import KIND_CHECK_S, check_kinds

    while True:
        time.sleep(KIND_CHECK_S)
        for follower in list(built.values()):
            try:
                check_kinds(config, follower)
            except Exception as err:  # a source down for a round: the next one asks again
                logging.getLogger("cdcsync.rebuild").warning("follower=%s kinds not checked: %s", follower.name, err)


def _collect_lag(config: Any, followers: list[Any]) -> None:
    """Export followers' and sources' lag (``connectors.lag``) every ``COLLECT_S``; a failed round is only logged."""
    from cdcsync.connectors.lag import COLLECT_S, LagCollector

    collector = LagCollector(config, followers)
    while True:
        try:
            collector.tick()
        except Exception as err:  # Kafka or a source down for a round: the next one tries again
            logging.getLogger("cdcsync.lag").warning("lag not collected: %s", err)
        time.sleep(COLLECT_S)


def _close_quietly(follower: Any) -> None:
    try:
        follower.sink.close()
    except Exception as err:  # a sink that failed may fail to close too; the rebuilt one replaces it
        logging.getLogger("cdcsync.run").warning("follower=%s closing its sink: %s", follower.name, err)


def stop_between_batches(query: Any, timeout_s: float = 30) -> None:
    """Stop a query when no batch is running, or after ``timeout_s`` anyway (catching up, a batch follows a batch).

    A batch cut short is replayed at the next start (its offsets were not committed): nothing is lost.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.status.get("isTriggerActive"):
        time.sleep(0.1)
    query.stop()
