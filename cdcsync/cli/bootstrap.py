"""``cdcsync bootstrap``: build a new follower's store from a snapshot aligned with exact offsets."""

from __future__ import annotations

import json

import click

from cdcsync.cli import load, origin_option


@click.command("bootstrap")
@click.argument("follower")
@origin_option("Snapshot from the compacted topics, or from a consistent read of the source database.")
@click.option("--table", "tables", multiple=True, help="Only this table (namespace.table); repeatable.")
@click.option(
    "--partitions",
    type=click.IntRange(1, 256),
    default=2,
    show_default=True,
    help="--from source: parallel JDBC reads per table.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout (progress stays on stderr).")
@click.pass_context
def bootstrap(
    ctx: click.Context, follower: str, origin: str, tables: tuple[str, ...], partitions: int, as_json: bool
) -> None:
    """Fill FOLLOWER's store from a snapshot, then record the log position it is aligned with.

    `cdcsync run` then streams the follower from exactly there: no gap, no
    double apply. Safe to re-run after a crash; refused while another bootstrap
    or reindex of FOLLOWER runs. Exit 0 done, 1 failed or refused, 2 usage or
    config error.
    """
    from cdcsync.snapshot.bootstrap import bootstrap_from_topics, follower_lock
    from cdcsync.snapshot.replay import ProgressBar
    from cdcsync.snapshot.replay import as_json as summary_json
    from cdcsync.state import base_dir
    from cdcsync.sync.build import build_follower
    from cdcsync.sync.catalog import mappings_for
    from cdcsync.sync.sinks import needs_spark
    from cdcsync.sync.stream import checkpoint_dir

    config = load(ctx)
    cfg = config.follower(follower)
    if cfg.documents is not None and (origin == "source" or tables):
        given = "--from source" if origin == "source" else "--table"
        raise click.UsageError(
            f"{given}: follower {cfg.name} keeps documents, built from the topics whole (docs/documents.md)"
        )
    with follower_lock(base_dir(config), cfg.name, f"bootstrap {cfg.name}"):  # one run per follower
        spark = None
        if needs_spark(cfg) or origin == "source":
            from cdcsync.spark import spark_session

            # Spark only reads JDBC pieces for a sink without Spark: its start is most of its work (class_archive)
            spark = spark_session(f"cdcsync-bootstrap-{cfg.name}", class_archive=not needs_spark(cfg), config=config)
        mappings = mappings_for(config, cfg)
        if tables:
            wanted = {t.lower() for t in tables}
            known = {m.table.lower() for m in mappings.values()}
            if not wanted <= known:
                raise click.UsageError(
                    f"follower {cfg.name} does not follow {sorted(wanted - known)}; it follows {sorted(known)}"
                )
            mappings = {topic: m for topic, m in mappings.items() if m.table.lower() in wanted}
        # bootstrap stages, then publishes; its follower alone fills the staged generations
        built = build_follower(config, cfg, spark, mappings, open_sink=False, fill=True)
        if origin == "source":
            from cdcsync.snapshot.source import bootstrap_from_source

            assert spark is not None
            with ProgressBar("bootstrap") as progress:
                summary = bootstrap_from_source(
                    config, cfg, built, spark, checkpoint_dir(config, cfg), base_dir(config), partitions, progress
                )
        else:
            with ProgressBar("bootstrap") as progress:
                summary = bootstrap_from_topics(
                    config, cfg, built, checkpoint_dir(config, cfg), base_dir(config), progress
                )
    if as_json:
        click.echo(json.dumps(summary_json(summary), indent=2))
    else:
        click.echo(
            f"follower {cfg.name}: {summary.records:,} records in {summary.seconds}s "
            f"(applied {summary.applied:,}, older {summary.older:,}, tombstones {summary.tombstones:,}, "
            f"dead-lettered {summary.dead_lettered:,}); streaming starts at {json.dumps(summary.offsets)}"
        )
