"""The daemon's lag page: per follower and table, how far behind and how fresh; per source, capture.

``metrics.serve`` answers ``/`` (and ``/lag``) with one HTML page that reloads
itself every ``REFRESH_S`` seconds, and ``/lag.json`` with the data the page
is drawn from. Nothing is measured here; the page shows what the daemon
already holds:

=================== ======================================================
what                from
=================== ======================================================
offsets, seconds    the lag collector's last report (``sync.lag_report``, every
behind; capture     ~10 s, kept by ``metrics.record_lag``)
follower state,     the supervisor's ``cdcsync_follower_state`` and
restarts            ``cdcsync_follower_restarts_total``
reasons             the health lines ``/healthz`` serves
                    (``follower NAME ...: reason``, ``capture NAME: ...``)
last change applied ``cdcsync_last_applied_commit_timestamp_seconds``
=================== ======================================================

``snapshot`` reads those; ``build`` and ``render`` are pure, so a test can
draw a page from made-up numbers. Plain HTML with inline CSS: no script, no
external asset, readable where the daemon runs with no network.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from html import escape
from typing import Any

REFRESH_S = 5  # the collector reports every ~10 s: a reload sees each report
SLOW_S = 300.0  # seconds behind drawn red from here (the alert rules' threshold)

Health = Callable[[], tuple[bool, list[str]]]


# --------------------------------------------------------------------------- data


def snapshot(health: Health | None = None, now_s: float | None = None) -> dict[str, Any]:
    """What the page shows, read from the daemon's metrics, its last lag report and its health."""
    from cdcsync import metrics

    def samples(metric: Any, name: str) -> list[tuple[dict[str, str], float]]:
        return [(s.labels, s.value) for family in metric.collect() for s in family.samples if s.name == name]

    states = {
        lab["follower"]: lab["state"] for lab, v in samples(metrics.FOLLOWER_STATE, "cdcsync_follower_state") if v
    }
    restarts = {lab["follower"]: int(v) for lab, v in samples(metrics.RESTARTS, "cdcsync_follower_restarts_total")}
    applied = {
        (lab["follower"], lab["table"]): v
        for lab, v in samples(metrics.FRESHNESS, "cdcsync_last_applied_commit_timestamp_seconds")
    }
    try:
        ok, lines = health() if health is not None else (True, [])
    except Exception as err:  # the page still shows the lag when health cannot be read
        ok, lines = False, [f"health unreadable: {err}"]
    report = metrics.latest_lag()
    ended = {
        (lab["follower"], lab["table"]): v
        for lab, v in samples(metrics.VERIFY_LAST_PASS, "cdcsync_verify_last_pass_timestamp_seconds")
    }
    verified = {
        key: (int(v), ended[key])
        for key, v in (
            ((lab["follower"], lab["table"]), v)
            for lab, v in samples(metrics.VERIFY_DIVERGENT, "cdcsync_verify_divergent_rows")
        )
        if key in ended
    }
    now = time.time() if now_s is None else now_s
    return build(report, states, restarts, applied, ok, lines, now, verified)


def build(
    report: Any,
    states: dict[str, str],
    restarts: dict[str, int],
    applied: dict[tuple[str, str], float],
    healthy: bool,
    health_lines: list[str],
    now_s: float,
    verified: dict[tuple[str, str], tuple[int, float]] | None = None,
) -> dict[str, Any]:
    """The page's data (``/lag.json``) from a ``sync.lag_report.LagReport`` (or None before the first) and the rest.

    ``verified``: (follower, ``source.namespace.table``) -> (rows differing, end time) of its last background pass.
    """
    verified = verified or {}
    reasons: dict[str, str] = {}
    problems: list[str] = []
    for line in health_lines:
        kind, _, rest = line.partition(" ")
        name = rest.split(" ", 1)[0].rstrip(":")
        if kind in ("follower", "capture") and name:
            reasons[f"{kind} {name}"] = rest.split(": ", 1)[1] if ": " in rest else rest
        problems.append(line)
    if report is not None:
        problems += report.problems

    by_name = {f.follower: f for f in (report.followers if report is not None else [])}
    followers = []
    for name in [*by_name, *sorted(set(states) - set(by_name))]:
        lag = by_name.get(name)
        tables = []
        for t in lag.tables if lag is not None else []:
            commit_s = applied.get((name, t.table))
            checked = verified.get((name, f"{t.source}.{t.table}"))
            tables.append(
                {
                    "source": t.source,
                    "table": t.table,
                    "topic": t.topic,
                    "state": t.state,
                    "offsets_behind": t.offsets_behind,
                    "seconds_behind": t.seconds_behind,
                    "last_applied_commit_age_s": None if commit_s is None else max(0.0, now_s - commit_s),
                    "divergent_rows": None if checked is None else checked[0],
                    "verified_age_s": None if checked is None else max(0.0, now_s - checked[1]),
                }
            )
        followers.append(
            {
                "follower": name,
                "state": states.get(name, "unknown"),
                "restarts": restarts.get(name, 0),
                "reason": reasons.get(f"follower {name}", ""),
                "offsets_behind": sum(t["offsets_behind"] for t in tables) if lag is not None else None,
                "tables": tables,
            }
        )
    sources = []
    for s in report.sources if report is not None else []:
        sources.append({**s.as_dict(), "problem": reasons.get(f"capture {s.source}", "")})
    return {
        "at_s": now_s,
        "lag_at_s": None if report is None else report.at_ms / 1000,
        "healthy": healthy,
        "problems": problems,
        "followers": followers,
        "sources": sources,
    }


# --------------------------------------------------------------------------- page


def seconds(value: float | None) -> str:
    if value is None:
        return "?"
    if value == 0:
        return "0 s"
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def size(value: float | None) -> str:
    if value is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


_TONE = {
    "healthy": "ok",
    "unhealthy": "bad",
    "running": "ok",
    "caught up": "ok",
    "capturing": "ok",
    "idle": "ok",
    "starting": "info",
    "behind": "warn",
    "restarting": "warn",
    "stopped": "bad",
    "stalled": "bad",
    "no heartbeat": "bad",
}

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1f2328;
background:#f6f8fa}
header{background:#24292f;color:#fff;padding:12px 24px;display:flex;gap:16px;align-items:baseline}
header h1{font-size:20px;margin:0}header .when{color:#c9d1d9;font-size:13px}
main{padding:8px 24px 24px;max-width:1150px}
h2{font-size:17px;margin:20px 0 8px}
section.follower{background:#fff;border:1px solid #d0d7de;border-radius:6px;margin:0 0 14px;padding:10px 14px}
section.follower h3{font-size:16px;margin:0 0 6px;display:flex;gap:10px;align-items:center}
.reason{color:#cf222e;margin:0 0 6px;font-size:14px;white-space:pre-wrap}
.muted{color:#57606a;font-size:13px;font-weight:normal}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #eaeef2}
th{font-size:13px;color:#57606a;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;font-size:13px;font-weight:600}
.ok{background:#dafbe1;color:#116329}.warn{background:#fff8c5;color:#7d4e00}
.bad{background:#ffebe9;color:#a40e26}.info{background:#ddf4ff;color:#0550ae}
td.slow{color:#a40e26;font-weight:600}
ul.problems{background:#ffebe9;border:1px solid #ff8182;border-radius:6px;padding:8px 8px 8px 28px;margin:12px 0}
"""


def verified_cell(divergent: int | None, age_s: float | None) -> str:
    """The cell of a table's last background verify pass: rows differing, and how long ago it ended."""
    if divergent is None or age_s is None:
        return '<td class="muted">not yet</td>'
    if divergent == 0:
        return f"<td>same as the source, {seconds(age_s)} ago</td>"
    return f"<td class=slow>{divergent:,} rows differ, {seconds(age_s)} ago</td>"


def badge(state: str) -> str:
    return f'<span class="badge {_TONE.get(state, "info")}">{escape(state)}</span>'


def render(data: dict[str, Any]) -> str:
    """The page for ``build``'s data."""
    now = data["at_s"]
    measured = (
        f"lag measured {seconds(max(0.0, now - data['lag_at_s']))} ago"
        if data["lag_at_s"] is not None
        else "lag not measured yet: the daemon measures every ~10 s after it starts"
    )
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f'<meta http-equiv="refresh" content="{REFRESH_S}">',
        "<title>cdcsync lag</title>",
        f"<style>{CSS}</style></head><body>",
        f"<header><h1>cdcsync lag</h1>{badge('healthy' if data['healthy'] else 'unhealthy')}",
        f'<span class="when">{escape(time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(now)))} · {measured}'
        f" · reloads every {REFRESH_S} s · <a style=color:#c9d1d9 href=/lag.json>json</a></span></header><main>",
    ]
    if data["problems"]:
        out.append('<ul class="problems">' + "".join(f"<li>{escape(p)}</li>" for p in data["problems"]) + "</ul>")
    out.append("<h2>Followers</h2>")
    if not data["followers"]:
        out.append('<p class="muted">no follower has started yet</p>')
    for f in data["followers"]:
        restarts = f"{f['restarts']} restart{'s' if f['restarts'] != 1 else ''}"
        total = "" if f["offsets_behind"] is None else f" · {f['offsets_behind']:,} offsets behind"
        out.append(
            f'<section class="follower"><h3>{escape(f["follower"])} {badge(f["state"])}'
            f'<span class="muted">{restarts}{total}</span></h3>'
        )
        if f["reason"]:
            out.append(f'<p class="reason">{escape(f["reason"])}</p>')
        if f["tables"]:
            out.append(
                "<table><tr><th>table</th><th>source</th><th>state</th><th class=num>offsets behind</th>"
                "<th class=num>seconds behind</th><th class=num>last change applied</th><th>verified</th></tr>"
            )
            for t in f["tables"]:
                slow = " slow" if (t["seconds_behind"] or 0) >= SLOW_S else ""
                age = t["last_applied_commit_age_s"]
                out.append(
                    f"<tr><td>{escape(t['table'])}</td><td>{escape(t['source'])}</td><td>{badge(t['state'])}</td>"
                    f"<td class=num>{t['offsets_behind']:,}</td>"
                    f"<td class='num{slow}'>{seconds(t['seconds_behind'])}</td>"
                    f"<td class=num>{'–' if age is None else 'committed ' + seconds(age) + ' ago'}</td>"
                    f"{verified_cell(t['divergent_rows'], t['verified_age_s'])}</tr>"
                )
            out.append("</table>")
        elif data["lag_at_s"] is not None:
            out.append('<p class="muted">follows no table whose topic exists yet</p>')
        out.append("</section>")
    out.append("<h2>Capture</h2>")
    if data["sources"]:
        out.append(
            "<table><tr><th>source</th><th>kind</th><th>state</th><th class=num>heartbeat age</th>"
            "<th class=num>capture lag</th><th>slot</th><th class=num>WAL retained</th><th>problem</th></tr>"
        )
        for s in data["sources"]:
            out.append(
                f"<tr><td>{escape(s['source'])}</td><td>{escape(s['kind'])}</td><td>{badge(s['state'])}</td>"
                f"<td class=num>{seconds(s['heartbeat_age_s'])}</td><td class=num>{seconds(s['capture_lag_s'])}</td>"
                f"<td>{escape(s['slot'] or '–')}</td><td class=num>{size(s['slot_retained_wal_bytes'])}</td>"
                f"<td>{escape(s['problem'])}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append('<p class="muted">no source measured yet</p>')
    out.append("</main></body></html>")
    return "\n".join(out)


def pages(health: Health | None = None) -> Callable[[str], tuple[bytes, str] | None]:
    """The lag page's paths for ``metrics.serve``: ``/`` and ``/lag`` (HTML), ``/lag.json`` (its data)."""

    def page(path: str) -> tuple[bytes, str] | None:
        if path not in ("/", "/lag", "/lag.json"):
            return None
        data = snapshot(health)
        if path == "/lag.json":
            return json.dumps(data).encode(), "application/json"
        return render(data).encode(), "text/html; charset=utf-8"

    return page
