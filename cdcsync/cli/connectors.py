"""``cdcsync connectors apply|status|delete|snapshot``: capture definitions onto Kafka Connect."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from cdcsync.cli import load

if TYPE_CHECKING:
    from cdcsync.connectors.apply import ApplyResult
    from cdcsync.connectors.remove import Pruned


@click.group()
def connectors() -> None:
    """Register Debezium connectors and show their state."""


@connectors.command("apply")
@click.argument("sources", nargs=-1)
@click.option("--prune", is_flag=True, help="Also remove the capture of sources no longer in the config.")
@click.option("--topics", is_flag=True, help="With --prune: also delete the pruned sources' topics and secrets files.")
@click.option("--force", is_flag=True, help="With --prune: prune even sources a follower in the config still reads.")
@click.option("--dry-run", is_flag=True, help="With --prune: change nothing; show what would be pruned.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def apply_cmd(
    ctx: click.Context, sources: tuple[str, ...], prune: bool, topics: bool, force: bool, dry_run: bool, as_json: bool
) -> None:
    """Register or update one connector per source (all declared sources by default).

    Validates every config with Connect and checks every source first; nothing
    is registered unless all pass. Applying an unchanged config is a no-op.
    A table added to a running connector gets an incremental snapshot, so its
    existing rows reach its topic too.

    A connector apply made whose source is no longer in the config is listed
    as a warning. With --prune it is removed as `connectors delete` removes a
    source: connector, replication slot, publication, signal table, and with
    --topics its topics; a connector apply did not make is never touched.
    Refused (exit 2, nothing changed) while a follower still names one of its
    tables, unless --force; exit 1 when one could not be removed (its
    database unreachable), naming what stays.
    """
    from cdcsync.connectors import remove
    from cdcsync.connectors.apply import apply, client_for
    from cdcsync.connectors.owned import orphans

    if (topics or force or dry_run) and not prune:
        raise click.UsageError("--topics, --force and --dry-run go with --prune")
    config = load(ctx)
    client = client_for(config)
    found = orphans(config, client)
    if prune and not force:
        remove.refuse_read(config, found)  # before apply: a refusal changes nothing
    results = [] if dry_run or (prune and not config.sources) else apply(config, list(sources) or None, client)
    if prune:
        pruned = remove.prune(config, found, topics=topics, force=force, dry_run=dry_run, client=client)
    else:
        pruned = [
            remove.Pruned(o.name, "orphaned", held=[f"connector {o.name}", *o.holds()], error=o.problem) for o in found
        ]
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results] + [p.as_dict() for p in pruned], indent=2))
    else:
        _print_applied(results)
        _print_pruned(pruned)
    if any(p.action == "kept" for p in pruned):
        ctx.exit(1)


def _print_applied(results: list[ApplyResult]) -> None:
    for r in results:
        for line in r.source_changes:
            click.echo(f"source {r.connector}: {line}")
        for line in r.topics:
            click.echo(f"  {line}")
        detail = f" ({', '.join(r.changed_keys)})" if r.action == "updated" else ""
        click.echo(f"connector {r.connector}: {r.action}{detail}")
        for line in r.warnings:
            click.echo(f"warning: {line}", err=True)
        if r.snapshot:
            click.echo(f"connector {r.connector}: incremental snapshot requested for {', '.join(r.snapshot)}")


def _print_pruned(pruned: list[Pruned]) -> None:
    for p in pruned:
        if p.action == "pruned":
            for line in p.done:
                click.echo(f"source {p.connector}: {line}")
            click.echo(f"connector {p.connector}: pruned")
        elif p.action == "would prune":
            click.echo(f"connector {p.connector}: would prune {', '.join(p.held)}")
        elif p.action == "orphaned":
            click.echo(
                f"warning: connector {p.connector}: its source is no longer in the config; it still holds "
                f"{', '.join(p.held)}; `cdcsync connectors apply --prune` removes them"
                + (f" ({p.error})" if p.error else ""),
                err=True,
            )
        else:
            for line in p.done:
                click.echo(f"source {p.connector}: {line}")
            click.echo(f"error: {p.error}", err=True)


@connectors.command("delete")
@click.argument("source")
@click.option("--topics", is_flag=True, help="Also delete the source's topics and its connector's secrets file.")
@click.option("--force", is_flag=True, help="Delete even while followers in the config still read the source.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.pass_context
def delete_cmd(ctx: click.Context, source: str, topics: bool, force: bool, as_json: bool) -> None:
    """Remove a source's capture for good: its connector, then its replication slot (Postgres), publication and
    signal table, and with --topics its topics.

    A connector deleted in Kafka Connect alone leaves its slot, which keeps the
    database's WAL until its disk fills. Refused (exit 2) while a follower
    still reads the source, unless --force; exit 1, nothing removed, when the
    database cannot be reached. Safe to run again.
    """
    from cdcsync.connectors.remove import delete

    removed = delete(load(ctx, discover=False), source, topics=topics, force=force)
    if as_json:
        click.echo(json.dumps(removed.as_dict(), indent=2))
        return
    for line in removed.done:
        click.echo(f"source {removed.source}: {line}")


@connectors.command("status")
@click.argument("sources", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@click.pass_context
def status_cmd(ctx: click.Context, sources: tuple[str, ...], as_json: bool) -> None:
    """Show each declared connector's state and its tasks'. Exit 1 unless all are RUNNING."""
    from cdcsync.connectors.apply import healthy, status

    report = status(load(ctx), list(sources) or None)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for r in report:
            click.echo(f"{r['connector']:<28} {r['state']:<10} {r['worker'] or ''}")
            for t in r["tasks"]:
                click.echo(f"  task {t['id']:<3} {t['state']:<10} {t.get('trace', '')}")
    if not healthy(report):
        ctx.exit(1)


@connectors.command("snapshot")
@click.argument("source")
@click.option("--table", "tables", multiple=True, required=True, help="A captured table (namespace.table); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the signal as JSON.")
@click.pass_context
def snapshot_cmd(ctx: click.Context, source: str, tables: tuple[str, ...], as_json: bool) -> None:
    """Ask SOURCE's connector to read TABLE's rows again into its topic (a Debezium incremental snapshot).

    `connectors apply` does this by itself for a table added to a running
    connector; run it by hand when a topic lacks rows its table holds. Capture
    reads the table in chunks while it keeps streaming; followers apply the
    rows by version. Exit 0 signalled, 1 failed, 2 usage or config error.
    """
    from cdcsync.connectors.apply import client_for
    from cdcsync.connectors.render import render
    from cdcsync.connectors.signals import request_snapshot, wait_for_tasks

    config = load(ctx)
    src = config.source(source)
    by_name = {str(t).lower(): t for t in src.tables}
    unknown = [t for t in tables if t.lower() not in by_name]
    if unknown:
        raise click.UsageError(f"source {src.name} does not capture {unknown}; it captures {sorted(by_name)}")
    wanted = [by_name[t.lower()] for t in tables]
    wait_for_tasks(client_for(config), src, render(src, config), timeout_s=60)
    signal = request_snapshot(src, wanted)
    if as_json:
        click.echo(json.dumps({"source": src.name, "signal": signal, "tables": [str(t) for t in wanted]}))
    else:
        click.echo(f"connector {src.name}: incremental snapshot requested for {', '.join(map(str, wanted))} ({signal})")
