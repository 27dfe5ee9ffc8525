"""``cdcsync verify``: does each derived store match its source?"""

from __future__ import annotations

import json

import click

from cdcsync.cli import load


@click.command("verify")
@click.argument("followers", nargs=-1)
@click.option("--table", "only", metavar="SOURCE.NAMESPACE.TABLE", help="Only this table.")
@click.option("--document", metavar="NAME", help="Only this document (a follower that keeps documents).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the report as JSON, every listed id (`repair --from` reads it)."
)
@click.option(
    "--by-row",
    is_flag=True,
    help="Compare every row, never sums of ranges of them where the store and the source compute them.",
)
@click.pass_context
def verify(
    ctx: click.Context, followers: tuple[str, ...], only: str | None, document: str | None, as_json: bool, by_row: bool
) -> None:
    """Compare source tables with each follower's store row by row. Exit 1 on any divergence.

    Reports rows missing from the store, extra rows, and stale rows (present
    but with different values). A row that differs is looked at again a few
    times over ~15 s, so a row changed during the pass, which the follower
    then applies, is not reported. `cdcsync repair` makes the rows right.

    A Delta table whose columns Postgres and Spark can both checksum is
    compared by ranges of keys first, each summed where it is stored; only
    the ranges that differ are read row by row (docs/followers.md, "Range
    checksums").

    A follower that keeps documents has each document built from the source
    with SQL and compared with the stored one (docs/documents.md).
    """
    from cdcsync.snapshot.reindex import killed_line
    from cdcsync.sync import reindex_needed
    from cdcsync.sync.documents.verify import verify_documents
    from cdcsync.sync.sinks import build_sink, needs_spark
    from cdcsync.sync.verify.compare import verify_follower

    config = load(ctx)
    selected = [config.follower(n) for n in followers] or list(config.followers)
    spark = None
    if any(needs_spark(f) for f in selected):
        from cdcsync.spark import spark_session

        spark = spark_session("cdcsync-verify", config=config)
    reports = []
    for follower in selected:
        killed = killed_line(config, follower.name)
        if killed is not None:  # explains the differences below; the comparison still decides the exit code
            click.echo(f"warning: {killed}", err=True)
        for line in reindex_needed.lines(config, follower.name):
            click.echo(f"warning: {line}", err=True)
        if (document if follower.documents is None else only) is not None:
            wrong, keeps = ("--document", "tables") if follower.documents is None else ("--table", "documents")
            raise click.UsageError(f"{wrong}: follower {follower.name} keeps {keeps}")
        sink = build_sink(config, follower, spark)
        try:
            if follower.documents is not None:
                reports.extend(verify_documents(config, follower, sink, document, progress=_progress))
            else:
                reports.extend(verify_follower(config, follower, sink, only, progress=_progress, ranged=not by_row))
        finally:
            sink.close()
    if as_json:
        click.echo(json.dumps([r.as_dict(ids=None) for r in reports], indent=2))
    else:
        for r in reports:
            state = "ok" if r.clean else "DIVERGED"
            click.echo(
                f"{r.follower:<12} {r.table:<40} {state:<9} source={r.source_rows} store={r.store_rows} "
                f"missing={r.missing_count} stale={r.stale_count} extra={r.extra_count}"
            )
            for kind in ("missing", "stale", "extra"):
                ids, count = getattr(r, kind), getattr(r, f"{kind}_count")
                if ids:
                    click.echo(f"    {kind}: {', '.join(ids[:5])}{' ...' if count > 5 else ''}")
            for ident, fields in r.differing.items():  # what differs in the first stale rows, source vs store
                shown = "; ".join(f"{name}: {there!r} != {held!r}" for name, (there, held) in fields.items())
                click.echo(f"    {ident}: {shown[:500]}")
    if not all(r.clean for r in reports):
        ctx.exit(1)


def _progress(line: str) -> None:
    click.echo(line, err=True)
