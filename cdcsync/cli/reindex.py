"""``cdcsync reindex``: rebuild a follower's store beside the live one, then switch readers to it."""

from __future__ import annotations

import json

import click

from cdcsync.cli import load, origin_option, tables_only


@click.command("reindex")
@click.argument("follower")
@click.option("--table", "table", default=None, help="Rebuild only this target (or source table); default: all.")
@origin_option(
    "Fill the new store from the compacted topics, or from a read of the source database aligned with the log"
    " (after a RENAME COLUMN, a column added with a DEFAULT or a type change: `cdcsync status` names them)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout (progress stays on stderr).")
@click.pass_context
def reindex(ctx: click.Context, follower: str, table: str | None, origin: str, as_json: bool) -> None:
    """Build a new store for FOLLOWER from its topics while the old one serves, then switch readers atomically.

    The follower's daemon keeps streaming meanwhile; its checkpoint is not
    touched. Elasticsearch: a new index behind the alias; Redis: a staged key
    generation that replaces the live keys key by key; Delta: one new table
    version. A reindex killed earlier is finished first; one running already
    makes this one refused. Exit 0 done, 1 failed or refused, 2 usage or
    config error.
    """
    from cdcsync.snapshot.reindex import reindex as run_reindex
    from cdcsync.snapshot.replay import ProgressBar
    from cdcsync.sync.sinks import needs_spark

    config = load(ctx)
    cfg = config.follower(follower)
    tables_only(
        cfg, "reindex", "A document follower's reindex is not there yet: `cdcsync verify` says which documents differ"
    )
    spark = None
    if needs_spark(cfg) or origin == "source":
        from cdcsync.spark import spark_session

        # Spark only reads JDBC pieces for a sink without Spark: its start is most of its work (class_archive)
        spark = spark_session(f"cdcsync-reindex-{cfg.name}", class_archive=not needs_spark(cfg), config=config)
    with ProgressBar("reindex") as progress:
        summary = run_reindex(config, cfg, spark, table, progress, origin)
    if summary.finished:
        click.echo(f"follower {cfg.name}: an earlier reindex was killed; {summary.finished}", err=True)
    if as_json:
        click.echo(json.dumps(summary.as_json(), indent=2))
    else:
        click.echo(
            f"follower {cfg.name}: rebuilt {', '.join(summary.targets)} from {summary.fill.records:,} records, "
            f"switched, then caught up {summary.catch_up.records:,} records; {summary.seconds}s"
        )
