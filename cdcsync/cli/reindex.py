"""``cdcsync reindex``: rebuild a follower's store beside the live one, then switch readers to it."""

from __future__ import annotations

import json
from typing import Any

import click

from cdcsync.cli import load, origin_option


@click.command("reindex")
@click.argument("follower")
@click.option("--table", "table", default=None, help="Rebuild only this target (or source table); default: all.")
@origin_option(
    "Fill the new store from the compacted topics, or from a read of the source database aligned with the log"
    " (after a RENAME COLUMN, a column added with a DEFAULT or a type change: `cdcsync status` names them)."
)
@click.option(
    "--document", default=None, metavar="NAME", help="A follower of documents: only this document; default: all."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout (progress stays on stderr).")
@click.pass_context
def reindex(
    ctx: click.Context, follower: str, table: str | None, origin: str, document: str | None, as_json: bool
) -> None:
    """Build a new store for FOLLOWER from its topics while the old one serves, then switch readers atomically.

    The follower's daemon keeps streaming meanwhile; its checkpoint is not
    touched. Elasticsearch: a new index behind the alias; Redis: a staged key
    generation that replaces the live keys key by key; Delta: one new table
    version. A reindex killed earlier is finished first; one running already
    makes this one refused. Exit 0 done, 1 failed or refused, 2 usage or
    config error.

    A follower of documents is rebuilt from its mirror (no log, no source):
    every document into a new generation, switched, then the documents the
    daemon wrote meanwhile written again (docs/documents.md).
    """
    from cdcsync.snapshot.reindex import reindex as run_reindex
    from cdcsync.snapshot.replay import ProgressBar
    from cdcsync.sync.sinks import needs_spark

    config = load(ctx)
    cfg = config.follower(follower)
    if cfg.documents is not None:
        _documents(cfg, config, table, origin, document, as_json)
        return
    if document is not None:
        raise click.UsageError(f"--document: follower {cfg.name} keeps tables")
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


def _documents(cfg: Any, config: Any, table: str | None, origin: str, document: str | None, as_json: bool) -> None:
    from cdcsync.snapshot.documents import reindex_documents
    from cdcsync.snapshot.replay import ProgressBar

    if table is not None or origin != "topics":
        given = "--table" if table is not None else f"--from {origin}"
        raise click.UsageError(
            f"{given}: follower {cfg.name} keeps documents, rebuilt from its mirror (--document NAME for one)"
        )
    with ProgressBar("reindex") as progress:
        summary = reindex_documents(config, cfg, None, document, progress)
    if as_json:
        click.echo(json.dumps(summary.as_json(), indent=2))
        return
    for name, count in summary.written.items():
        click.echo(
            f"follower {cfg.name}: document {name}: {count:,} documents into a new generation, switched, then "
            f"{summary.caught_up[name]:,} written again; {summary.seconds}s"
        )
