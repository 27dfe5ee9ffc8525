"""``cdcsync connectors apply|status``: capture definitions onto Kafka Connect."""

from __future__ import annotations

import json

import click

from cdcsync.cli import load


@click.group()
def connectors() -> None:
    """Register Debezium connectors and show their state."""


@connectors.command("apply")
@click.argument("sources", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def apply_cmd(ctx: click.Context, sources: tuple[str, ...], as_json: bool) -> None:
    """Register or update one connector per source (all declared sources by default).

    Validates every config with Connect and checks every source first; nothing
    is registered unless all pass. Applying an unchanged config is a no-op.
    """
    from cdcsync.connectors.apply import apply

    results = apply(load(ctx), list(sources) or None)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
        return
    for r in results:
        for line in r.topics:
            click.echo(f"  {line}")
        detail = f" ({', '.join(r.changed_keys)})" if r.action == "updated" else ""
        click.echo(f"connector {r.connector}: {r.action}{detail}")


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
