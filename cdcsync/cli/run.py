"""``cdcsync run``: the daemon, one streaming query per follower."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from typing import Any

import click

from cdcsync.cli import load

POSITION_CHECK_S = 60  # how often a running follower's position is checked against the compaction horizon


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
@click.option("--master", envvar="CDCSYNC_SPARK_MASTER", show_envvar=True, default="local[*]", help="Spark master URL.")
@click.pass_context
def run(ctx: click.Context, followers: tuple[str, ...], once: bool, metrics_port: int, master: str) -> None:
    """Run the followers (all configured ones by default) until stopped.

    Each follower is its own Spark Structured Streaming query with its own
    checkpoint; a restart resumes where it stopped. A follower whose position
    is lost or falls past its topics' compaction horizon is refused at start
    and, while running, checked every minute (``sync.position``): the daemon
    stops and names ``reindex``. Exit 1 if a query fails.
    """
    from cdcsync import metrics
    from cdcsync.errors import RetryableError
    from cdcsync.spark import spark_session
    from cdcsync.sync.position import PositionError, check_position
    from cdcsync.sync.stream import build_follower, checkpoint_dir, start_query

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("cdcsync.run")
    config = load(ctx)
    log.info("effective config %s", json.dumps(config.redacted()))
    selected = [config.follower(n) for n in followers] or list(config.followers)
    if not selected:
        raise click.UsageError("no followers configured")
    spark = spark_session("cdcsync", master)
    queries, followed = [], []
    for cfg in selected:
        follower = build_follower(config, cfg, spark)
        queries.append(start_query(spark, config, cfg, follower, once=once))
        followed.append((cfg, sorted(follower.mappings)))
        log.info(
            "follower=%s started topics=%d checkpoint=%s", cfg.name, len(follower.mappings), checkpoint_dir(config, cfg)
        )
    if once:
        failed = False
        for query in queries:
            query.awaitTermination()
            if query.exception() is not None:
                failed = True
                log.error("query=%s failed: %s", query.name, query.exception())
        spark.stop()
        ctx.exit(1 if failed else 0)
    if metrics_port:
        metrics.serve(metrics_port)
        log.info("metrics on http://127.0.0.1:%d/metrics", metrics_port)

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: stopping.append(signum))
    next_check = time.monotonic() + POSITION_CHECK_S
    while not stopping:
        for query in queries:
            if not query.isActive:
                log.error("query=%s stopped: %s", query.name, query.exception())
                for other in queries:
                    other.stop()
                ctx.exit(1)
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + POSITION_CHECK_S
            for cfg, topics in followed:
                try:
                    check_position(config, cfg, topics)
                except RetryableError as err:
                    log.warning("follower=%s position check skipped: %s", cfg.name, err)
                except PositionError as err:
                    log.error("follower=%s %s", cfg.name, err)
                    for query in queries:
                        stop_between_batches(query)
                    ctx.exit(1)
        time.sleep(0.5)
    log.info("signal %d: stopping %d queries between batches", stopping[0], len(queries))
    for query in queries:
        stop_between_batches(query)
    ctx.exit(0)


def stop_between_batches(query: Any, timeout_s: float = 120) -> None:
    """Stop a query when no batch is running; a batch cut short would only be replayed, but is noisy."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.status.get("isTriggerActive"):
        time.sleep(0.1)
    query.stop()
