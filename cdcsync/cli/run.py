"""``cdcsync run``: the daemon, one streaming query per follower."""

from __future__ import annotations

import json
import logging
import signal
import sys
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
@click.option("--master", envvar="CDCSYNC_SPARK_MASTER", show_envvar=True, default="local[*]", help="Spark master URL.")
@click.pass_context
def run(ctx: click.Context, followers: tuple[str, ...], once: bool, metrics_port: int, master: str) -> None:
    """Run the followers (all configured ones by default) until stopped.

    Each follower is its own Spark Structured Streaming query with its own
    checkpoint; a restart resumes where it stopped. Exit 1 if a query fails.
    """
    from cdcsync import metrics
    from cdcsync.spark import spark_session
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
    queries = []
    for cfg in selected:
        follower = build_follower(config, cfg, spark)
        queries.append(start_query(spark, config, cfg, follower, once=once))
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

    def stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping %d queries", signum, len(queries))
        for query in queries:
            query.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while any(q.isActive for q in queries):
        spark.streams.awaitAnyTermination(5)
        spark.streams.resetTerminated()
        for query in queries:
            if not query.isActive and query.exception() is not None:
                log.error("query=%s failed: %s", query.name, query.exception())
                for other in queries:
                    other.stop()
                ctx.exit(1)
