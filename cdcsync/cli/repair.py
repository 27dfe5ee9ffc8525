"""``cdcsync repair``: make the rows where a store differs from its source right, through the log."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from cdcsync.cli import load


@click.command("repair")
@click.argument("follower")
@click.option("--table", "only", metavar="SOURCE.NAMESPACE.TABLE", help="Only this table, named as verify names it.")
@click.option(
    "--from", "report_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Repair what a `verify --json` report lists, instead of verifying first.",
)  # fmt: skip
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for the repaired rows to arrive.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done and the verify after it as JSON.")
@click.pass_context
def repair(
    ctx: click.Context, follower: str, only: str | None, report_file: Path | None, timeout: float, as_json: bool
) -> None:
    """Repair FOLLOWER's store where it differs from the source, then verify it again.

    Missing and stale rows are read again by capture (a Debezium incremental
    snapshot of those keys), so they reach every follower of the source in
    order with live changes; the daemon (`cdcsync run`) must be running to
    apply them. Rows only in the store are deleted with a version any later
    change of that key beats. Exit 0 when the verify after the repair is
    clean, 1 when rows still differ, 2 on a bad argument or config.

    A follower of documents has the documents that differ rebuilt from its
    mirror and written again (`--table documents.NAME` for one document);
    docs/documents.md.
    """
    from cdcsync.snapshot.repair import plans, request, wait
    from cdcsync.sync.catalog import mappings_for
    from cdcsync.sync.sinks import build_sink, needs_spark
    from cdcsync.sync.verify.compare import TableReport, verify_follower

    config = load(ctx)
    chosen = config.follower(follower)
    if chosen.documents is not None:
        _documents(ctx, config, chosen, only, report_file, as_json)
        return
    spark = None
    if needs_spark(chosen):
        from cdcsync.spark import spark_session

        spark = spark_session("cdcsync-repair", config=config)
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    sink = build_sink(config, chosen, spark)
    try:
        if report_file is not None:
            reports = [TableReport.from_dict(d) for d in json.loads(report_file.read_text())]
            reports = [r for r in reports if r.follower == chosen.name and only in (None, r.table)]
            sink.open(list(mappings_for(config, chosen).values()))
        else:
            say(f"verifying {chosen.name} ...")
            reports = verify_follower(config, chosen, sink, only, progress=say)
        todo = plans(config, chosen, reports)
        say(f"{len(todo)} tables differ" + "".join(f"\n  {_counts(p.report)}" for p in todo))
        done = [request(plan, sink) for plan in todo]
        for d in done:
            say(f"  {d.table}: asked again for {d.asked} rows in {d.signals} signals"
                f"{' (the whole table)' if d.whole_table else ''}, removed {d.removed} extra rows"
                f"{'; ' + d.note if d.note else ''}")  # fmt: skip
        deadline = time.monotonic() + timeout
        for plan, d in zip(todo, done, strict=True):
            wait(plan, sink, d, max(0.0, deadline - time.monotonic()), say)
        after = verify_follower(config, chosen, sink, only, progress=say) if todo else reports
    finally:
        sink.close()
    _after(ctx, [d.as_dict() for d in done], after, as_json,
           "rows still differ: see the lines above (is `cdcsync run` running?)")  # fmt: skip


def _after(ctx: click.Context, repaired: Any, after: list[Any], as_json: bool, still: str) -> None:
    """The verify after a repair, as lines or JSON with what was repaired; exit 1 unless clean."""
    clean = all(r.clean for r in after)
    if as_json:
        click.echo(json.dumps({"repaired": repaired, "verify": [r.as_dict() for r in after], "clean": clean},
                              indent=2))  # fmt: skip
    else:
        for r in after:
            click.echo(f"after: {_counts(r)}")
        click.echo("clean" if clean else still)
    if not clean:
        ctx.exit(1)


def _documents(
    ctx: click.Context, config: Any, chosen: Any, only: str | None, report_file: Path | None, as_json: bool
) -> None:
    from cdcsync.snapshot.documents import repair_documents, repaired
    from cdcsync.sync.documents.tree import document_of
    from cdcsync.sync.documents.verify import verify_documents
    from cdcsync.sync.sinks import build_sink
    from cdcsync.sync.verify.compare import TableReport

    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    document = document_of(only) if only is not None else None
    sink = build_sink(config, chosen, None)
    try:
        if report_file is not None:
            reports = [TableReport.from_dict(d) for d in json.loads(report_file.read_text())]
            reports = [r for r in reports if r.follower == chosen.name and only in (None, r.table)]
        else:
            say(f"verifying {chosen.name} ...")
            reports = verify_documents(config, chosen, sink, document, progress=say)
        todo = [r for r in reports if not r.clean]
        say(f"{len(todo)} documents differ" + "".join(f"\n  {_counts(r)}" for r in todo))
        done = repair_documents(config, chosen, None, todo) if todo else {}
        for line in repaired(done):
            say(f"  {line}")
        after = verify_documents(config, chosen, sink, document, progress=say) if todo else reports
    finally:
        sink.close()
    _after(ctx, done, after, as_json, "documents still differ: the mirror disagrees with the source for them")


def _counts(r: object) -> str:
    from cdcsync.sync.verify.compare import TableReport

    assert isinstance(r, TableReport)
    return f"{r.table}: missing={r.missing_count} stale={r.stale_count} extra={r.extra_count}"
