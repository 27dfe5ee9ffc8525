"""How ``bench.documents`` prints its figures when not asked for ``--json``: the tools side by side, the ratios."""

from __future__ import annotations

from typing import Any

MIB = 1024 * 1024


def _get(figures: dict[str, Any] | None, path: str) -> Any:
    value: Any = figures
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value < 100:
        return f"{value:.2f}"
    return f"{round(value):,}"


def rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, figure path, goal) per line of the table; a path of bytes ends in ``rss.total``."""
    rate, seconds = _get(results["tools"], "cdcsync.steady.rate") or _get(results["tools"], "pgsync.steady.rate"), ""
    steady = _get(results["tools"], "cdcsync.steady") or _get(results["tools"], "pgsync.steady") or {}
    seconds = f"{steady.get('seconds', '?')} s"
    fan = results["fan_out"]
    return [
        ("fill: documents/s", "fill.per_s", ">= 2x"),
        ("  seconds, start -> all visible", "fill.seconds", ""),
        ("  seconds, start -> first visible", "fill.first_s", ""),
        ("  documents/s after the first", "fill.per_s_after_first", ""),
        ("  peak RSS, MiB", "fill.rss.total", "flat in N"),
        (f"fan-out ({fan} documents): documents/s", "fan_out.per_s", ">= 10x"),
        ("  commit -> last visible p50, s", "fan_out.last_s_p50", ""),
        ("  commit -> last visible max, s", "fan_out.last_s_max", ""),
        ("  peak RSS, MiB", "fan_out.rss.total", "flat in N"),
        (f"steady {rate}/s x {seconds}: documents/s", "steady.per_s", ">= 10x"),
        ("  written, changes/s", "steady.written_per_s", ""),
        ("  freshness p50, s", "steady.fresh_p50_s", ""),
        ("  freshness p99, s", "steady.fresh_p99_s", "<= 2 s"),
        ("  freshness max, s", "steady.fresh_max_s", ""),
        ("  drain after the writer stopped, s", "steady.drain_s", ""),
        ("  peak RSS, MiB", "steady.rss.total", "flat in N"),
        ("burst, flat out: documents/s", "burst.per_s", "(capacity)"),
        ("  written, changes/s", "burst.written_per_s", ""),
        ("  seconds, first commit -> all visible", "burst.seconds", ""),
        ("  peak RSS, MiB", "burst.rss.total", "flat in N"),
    ]


def print_results(results: dict[str, Any]) -> None:
    tools = results["tools"]
    cdc, pgs = tools.get("cdcsync"), tools.get("pgsync")
    print(
        f"\ndocuments: {results['roots']:,} orders ({results['lines_per_order']} lines, {results['tags_per_order']}"
        f" tags each), commit {results['commit']}; PGSync {_get(pgs, 'version') or '-'}"
    )
    print(f"{'':<40} {'cdcsync':>10} {'PGSync':>10} {'cdc/PGS':>8}  goal")
    for label, path, goal in rows(results):
        a, b = _get(cdc, path), _get(pgs, path)
        if path.endswith("rss.total"):
            a, b = (None if v is None else v / MIB for v in (a, b))
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        print(f"{label:<40} {_cell(a):>10} {_cell(b):>10} {ratio:>8}  {goal}")
    if cdc is not None:
        parts = {p: _get(cdc, f"{p}.rss") or {} for p in ("fill", "fan_out", "steady", "burst")}
        split = "; ".join(
            f"{p} JVM {v.get('jvm', 0) / MIB:,.0f} + Python {v.get('python', 0) / MIB:,.0f}" for p, v in parts.items()
        )
        print(f"cdcsync's peak RSS, MiB: {split}; the connector's snapshot into Kafka took {cdc.get('snapshot_s')} s")
    if pgs is not None:
        print(f"PGSync's bootstrap took {pgs.get('bootstrap_s')} s")
    for name, figures in tools.items():
        steady = figures.get("steady") or {}
        if steady and not steady.get("caught_up"):
            print(f"{name}: the steady phase's last marker was not visible within the drain time: behind still")
