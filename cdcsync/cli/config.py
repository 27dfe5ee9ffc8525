"""``cdcsync config``: check the config file and show what it amounts to, or its JSON Schema and reference."""

from __future__ import annotations

import json
import sys

import click
import yaml

from cdcsync.cli import load


@click.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print the effective config as JSON instead of YAML.")
@click.option("--schema", is_flag=True, help="Print the config's JSON Schema (for editors) instead; no file is read.")
@click.option("--reference", is_flag=True, help="Print the config reference (docs/config.md) instead.")
@click.pass_context
def config(ctx: click.Context, as_json: bool, schema: bool, reference: bool) -> None:
    """Check the config file, and print it as cdcsync reads it: defaults filled in, overrides applied, secrets masked.

    Exit 0 when the file is valid, 2 (every problem listed) when it is not.
    """
    from cdcsync.config import reference as config_reference

    if schema:
        sys.stdout.write(config_reference.schema_text())
        return
    if reference:
        sys.stdout.write(config_reference.reference())
        return
    effective = load(ctx, discover=False).redacted()
    if as_json:
        click.echo(json.dumps(effective, indent=2))
    else:
        click.echo(yaml.safe_dump(effective, sort_keys=False, allow_unicode=True), nl=False)
