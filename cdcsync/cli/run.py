"""``cdcsync run``: the daemon (``sync.daemon``), assembled with the capture watchdog, lag, background verify and
reindex recovery."""

from __future__ import annotations

import json
import logging
import sys
from functools import partial
from typing import TYPE_CHECKING

import click

from cdcsync.cli import load

if TYPE_CHECKING:
    from cdcsync.config import Config, FollowerConfig


@click.command("run")
@click.argument("followers", nargs=-1)
@click.option("--once", is_flag=True, help="Apply everything in the log up to now, then exit (no daemon).")
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    envvar="CDCSYNC_METRICS_PORT",
    show_envvar=True,
    help="Port for /metrics (daemon only); 0 disables it [default: metrics.port, 19400].",
)
@click.option(
    "--metrics-host",
    default=None,
    envvar="CDCSYNC_METRICS_HOST",
    show_envvar=True,
    help="Address /metrics and /healthz listen on [default: metrics.host, loopback].",
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
    metrics_port: int | None,
    metrics_host: str | None,
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
    in the log, in the metrics and at /healthz (``sync.daemon``, ``sync.supervisor``).

    Exit 0 after SIGTERM/SIGINT (queries stopped between batches), 1 when
    every follower has stopped for good, 2 for a usage or config error.
    """
    from cdcsync.connectors.discover import CHECK_S as TABLES_CHECK_S
    from cdcsync.connectors.discover import TableWatch, resolve
    from cdcsync.connectors.watch import WATCH_S, CaptureWatch
    from cdcsync.snapshot import repair
    from cdcsync.snapshot.reindex import finish_killed
    from cdcsync.spark import spark_session
    from cdcsync.sync.daemon import Daemon, Round, run_once
    from cdcsync.sync.lag_report import COLLECT_S, LagCollector
    from cdcsync.sync.verify.background import BackgroundVerify

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "elastic_transport"):  # a line per request is not the daemon's news
        logging.getLogger(noisy).setLevel(logging.WARNING)
    base = load(ctx, discover=False)
    config = resolve(base)  # the tables of schemas/include as they are now; TableWatch finds later ones
    logging.getLogger("cdcsync.run").info("effective config %s", json.dumps(config.redacted()))
    metrics_port = config.metrics.port if metrics_port is None else metrics_port
    metrics_host = metrics_host or config.metrics.host
    selected = [config.follower(n) for n in followers] or list(config.followers)
    if not selected:
        raise click.UsageError("no followers configured")
    spark = spark_session("cdcsync", master, config=config)

    def prepare(follower: FollowerConfig) -> str | None:  # a reindex killed after its switch left a window out
        return finish_killed(config, follower, spark)

    if once:
        code = run_once(config, selected, spark, prepare)
        spark.stop()
        ctx.exit(code)
    rounds = []
    if capture_watch and config.sources:
        watch = CaptureWatch(config)
        rounds.append(Round("cdcsync.capture", watch.tick, WATCH_S, health=watch.health))
    collector = LagCollector(config, selected)
    if metrics_port:
        rounds.append(Round("cdcsync.lag", collector.tick, COLLECT_S))
    checks = BackgroundVerify(config, selected, spark, partial(repair.start, config))
    if any(f.verify.enabled for f in selected):
        rounds.append(Round("cdcsync.verify", checks.tick, checks.every_s))

    def adopt(captured: Config) -> None:  # tables created since the start, now captured: every round sees them
        collector.use(captured)
        checks.config, checks.repair = captured, partial(repair.start, captured)
        daemon.use(captured)

    if any(s.patterns for s in config.sources):
        rounds.append(Round("cdcsync.tables", TableWatch(base, config, adopt).tick, TABLES_CHECK_S))
    daemon = Daemon(config, selected, spark, prepare, rounds)
    if metrics_port:
        daemon.serve(metrics_port, metrics_host)
    ctx.exit(daemon.run())
