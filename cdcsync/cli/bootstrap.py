"""``cdcsync bootstrap``: build a new follower's store from a snapshot aligned with exact offsets."""

from __future__ import annotations

import json

import click

from cdcsync.cli import load


@click.command("bootstrap")
@click.argument("follower")
@click.option(
    "--from",
    "origin",
    type=click.Choice(["topics", "source"]),
    default="topics",
    show_default=True,
    help="Snapshot from the compacted topics, or from a consistent read of the source.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout (progress stays on stderr).")
@click.pass_context
def bootstrap(ctx: click.Context, follower: str, origin: str, as_json: bool) -> None:
    """Fill FOLLOWER's store up to the current end of its topics, then record that position.

    `cdcsync run` then streams the follower from exactly there. Safe to re-run
    after a crash. Exit 0 done, 1 failed, 2 usage or config error.
    """
    from cdcsync.snapshot.bootstrap import as_json as summary_json
    from cdcsync.snapshot.bootstrap import bootstrap_from_topics, progress_bar
    from cdcsync.sync.stream import base_dir, build_follower, checkpoint_dir

    if origin == "source":
        raise click.UsageError(
            "--from source is not built yet; use --from topics (the compacted topics hold the state)"
        )
    config = load(ctx)
    cfg = config.follower(follower)
    spark = None
    if cfg.kind == "delta":
        from cdcsync.spark import spark_session

        spark = spark_session(f"cdcsync-bootstrap-{cfg.name}")
    built = build_follower(config, cfg, spark, open_sink=False)  # bootstrap stages, then publishes
    summary = bootstrap_from_topics(config, cfg, built, checkpoint_dir(config, cfg), base_dir(config), progress_bar)
    if as_json:
        click.echo(json.dumps(summary_json(summary), indent=2))
    else:
        click.echo(
            f"follower {cfg.name}: {summary.records:,} records in {summary.seconds}s "
            f"(applied {summary.applied:,}, older {summary.older:,}, tombstones {summary.tombstones:,}, "
            f"dead-lettered {summary.dead_lettered:,}); streaming starts at {json.dumps(summary.offsets)}"
        )
