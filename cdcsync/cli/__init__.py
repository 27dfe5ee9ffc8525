"""The ``cdcsync`` command: one group, one module per command, loaded on use.

Commands import their heavy dependencies (pyspark, Kafka clients) only when
they run, so ``cdcsync --help`` answers at once. Exit codes, for every command:
0 success, 1 the operation failed or found a problem, 2 usage or config error.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from cdcsync import __version__
from cdcsync.errors import CdcsyncError, ConfigError

# command name -> (module, attribute, one-line help shown without importing it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "config": ("cdcsync.cli.config", "config", "Check the config file; print it as read, its schema or reference."),
    "connectors": ("cdcsync.cli.connectors", "connectors", "Register Debezium connectors and show their state."),
    "run": ("cdcsync.cli.run", "run", "Run the followers: the daemon (or --once)."),
    "bootstrap": ("cdcsync.cli.bootstrap", "bootstrap", "Build a new follower's store, aligned with exact offsets."),
    "reindex": ("cdcsync.cli.reindex", "reindex", "Rebuild a follower's store beside the live one, then switch."),
    "verify": ("cdcsync.cli.verify", "verify", "Compare each derived store with its source, row by row."),
    "repair": (
        "cdcsync.cli.repair",
        "repair",
        "Make the rows where a store differs from its source right, through the log.",
    ),
    "lag": ("cdcsync.cli.lag", "lag", "How far each follower and each source's capture is behind."),
    "status": ("cdcsync.cli.status", "status", "Capture, followers and sinks: healthy or not (exit 1)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in sorted(COMMANDS)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--config",
    "-c",
    "config_path",
    envvar="CDCSYNC_CONFIG",
    show_envvar=True,
    default="cdcsync.yaml",
    type=click.Path(dir_okay=False),
    help="The YAML config file.",
)
@click.version_option(__version__, prog_name="cdcsync")
@click.pass_context
def cli(ctx: click.Context, config_path: str) -> None:
    """Change-data-capture sync: a source database followed by Elasticsearch, Redis and Delta Lake."""
    ctx.obj = {"config_path": config_path}


def origin_option(help: str) -> Any:
    """``--from topics|source``: what bootstrap and reindex fill a store from (``origin``)."""
    return click.option(
        "--from", "origin", type=click.Choice(["topics", "source"]), default="topics", show_default=True, help=help
    )


def load(ctx: click.Context, discover: bool = True) -> Any:
    """The config; with ``discover``, each source's ``schemas``/``include`` tables listed (connectors.discover)."""
    from cdcsync.config.file import load_config

    config = load_config(ctx.obj["config_path"])
    if not discover:
        return config
    from cdcsync.connectors.discover import resolve

    return resolve(config)


def main(argv: list[str] | None = None) -> None:
    try:
        # Without standalone mode, click returns ``ctx.exit(code)``'s code instead of exiting with it.
        code = cli.main(args=argv, prog_name="cdcsync", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(2)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except ConfigError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    except CdcsyncError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)
