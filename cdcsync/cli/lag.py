"""``cdcsync lag``: how far each follower is behind its log, and capture behind its source (``sync.lag_report``)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import click

from cdcsync.cli import load
from cdcsync.lagpage import seconds, size  # one way to show a duration or a size, page and terminal


@click.command("lag")
@click.argument("followers", nargs=-1)
@click.option(
    "--watch",
    type=float,
    is_flag=False,
    flag_value=5.0,
    default=None,
    metavar="[SECONDS]",
    help="Redraw every SECONDS (5 when none given) until Ctrl-C; name FOLLOWERs before it or use --watch=N.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (with --watch: one line per report).")
@click.pass_context
def lag(ctx: click.Context, followers: tuple[str, ...], watch: float | None, as_json: bool) -> None:
    """Show lag per follower and table, and capture lag per source (all followers by default).

    Offsets behind: the log end minus the follower's position, read from its
    checkpoint (Spark commits no offsets to Kafka). Seconds behind: the source
    commit time of the newest change in the log minus that of the last change
    applied. Per source: heartbeat age (idle sources keep heartbeating, stuck
    ones stop), capture lag and, for Postgres, the WAL its slot retains.

    Needs no daemon: it reads the checkpoints and Kafka. Exit 0 whatever the
    lag; 1 when Kafka cannot be read.
    """
    from cdcsync.sync.lag_report import LagReader

    config = load(ctx)
    chosen = [config.follower(name) for name in followers] or list(config.followers)
    reader = LagReader(config)
    try:
        while True:
            report = reader.report(chosen)
            if as_json:
                click.echo(json.dumps(report.as_dict(), indent=None if watch else 2))
            else:
                if watch:
                    click.clear()
                click.echo(render(report.as_dict()))
            if not watch:
                return
            time.sleep(watch)
    except KeyboardInterrupt:
        return
    finally:
        reader.close()


def render(report: dict[str, Any]) -> str:
    """The report as two tables: followers by table, then sources."""
    when = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(report["at_ms"] / 1000))
    lines = [f"lag at {when}", ""]
    rows = [("FOLLOWER", "TABLE", "OFFSETS BEHIND", "SECONDS BEHIND", "STATE")]
    for f in report["followers"]:
        for t in f["tables"]:
            rows.append((f["follower"], t["table"], str(t["offsets_behind"]), seconds(t["seconds_behind"]), t["state"]))
        if not f["tables"]:
            rows.append((f["follower"], "-", "-", "-", "no topic yet"))
    lines += _table(rows, right=(2, 3))
    lines.append("")
    sources: list[tuple[str, ...]] = [
        ("SOURCE", "KIND", "STATE", "HEARTBEAT AGE", "CAPTURE LAG", "LAST CHANGE", "SLOT WAL RETAINED")
    ]
    for s in report["sources"]:
        sources.append(
            (
                s["source"],
                s["kind"],
                s["state"],
                seconds(s["heartbeat_age_s"]),
                seconds(s["capture_lag_s"]),
                "-" if s["newest_change_age_s"] is None else f"{seconds(s['newest_change_age_s'])} ago",
                size(s["slot_retained_wal_bytes"]),
            )
        )
    lines += _table(sources, right=(3, 4, 5, 6))
    if any(s["state"] in ("stalled", "no heartbeat") for s in report["sources"]):
        lines.append("")
        lines.append(
            "a stalled source adds nothing to its topics: its followers' lag can look 0 while they fall behind"
        )
    for problem in report["problems"]:
        lines.append(f"! {problem}")
    return "\n".join(lines)


def _table(rows: Sequence[tuple[str, ...]], right: tuple[int, ...]) -> list[str]:
    """``rows`` (the first the header) as aligned columns two spaces apart, the ``right`` ones right-aligned.

    rich lays the table out, measuring each cell as a terminal shows it (a
    wide character takes two columns); it is imported only here, so that
    ``cdcsync lag --help`` stays instant.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False)
    for i in range(len(rows[0])):
        table.add_column(justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: a cell is shown as it is, never read as markup
    console = Console(width=100_000, color_system=None, highlight=False)
    with console.capture() as out:
        console.print(table)
    return [line.rstrip() for line in out.get().splitlines()]
