"""``cdcsync status``: is the pipeline healthy? Capture, followers and sinks, one line each.

- **capture**, per source: the connector's and its tasks' state on Kafka
  Connect, and whether it actually produces: its heartbeat age
  (``sync.lag_report``); Connect says RUNNING for a task that produces nothing.
- **followers**: their state is the daemon's (``sync.supervisor``), read from
  its ``/healthz`` and ``/metrics`` at the metrics address ``cdcsync run``
  listens on. With no daemon answering there, every follower is reported as
  not running.
- **sinks**: Elasticsearch cluster health, Redis ``PING``, the Delta path
  readable.

Exit 0 when everything is healthy, 1 otherwise; the report names each problem.
Connection URLs are never printed (they may carry credentials).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

import click

from cdcsync.cli import load

TIMEOUT_S = 5.0


@dataclass
class Check:
    part: str  # capture | follower | sink
    name: str
    ok: bool
    state: str
    detail: str = ""

    @property
    def line(self) -> str:
        return f"{self.part} {self.name}: {self.state}" + (f" ({self.detail})" if self.detail else "")


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--metrics-host",
    default=None,
    envvar="CDCSYNC_METRICS_HOST",
    show_envvar=True,
    help="Where the daemon (`cdcsync run`) serves /healthz and /metrics [default: metrics.host].",
)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    envvar="CDCSYNC_METRICS_PORT",
    show_envvar=True,
    help="The daemon's metrics port [default: metrics.port].",
)
@click.pass_context
def status(ctx: click.Context, as_json: bool, metrics_host: str | None, metrics_port: int | None) -> None:
    """Show capture, followers and sinks; exit 0 when all are healthy, 1 when not.

    Capture: connector and task state on Kafka Connect, and the heartbeat age
    (a RUNNING task that stopped heartbeating is stuck). Followers: running,
    restarting or stopped and why, as the daemon at the metrics address
    reports them. Sinks: reachable or not.
    """
    config = load(ctx, discover=False)
    checks = capture_checks(config)
    daemon_url = (
        f"http://{metrics_host or config.metrics.host}:{config.metrics.port if metrics_port is None else metrics_port}"
    )
    daemon = read_daemon(daemon_url)
    checks += follower_checks(config, daemon, daemon_url)
    checks += [sink_check(config, cfg) for cfg in config.followers]
    healthy = all(c.ok for c in checks)
    if as_json:
        report = {
            "healthy": healthy,
            "daemon": {"url": daemon_url, "answers": daemon is not None, "health": (daemon or {}).get("health")},
            "checks": [asdict(c) for c in checks],
            "problems": [c.line for c in checks if not c.ok],
        }
        click.echo(json.dumps(report, indent=2))
    else:
        for part in ("capture", "follower", "sink"):
            click.echo(f"{part}s" + (f" (daemon at {daemon_url})" if part == "follower" else ""))
            for c in (c for c in checks if c.part == part):
                click.echo(
                    f"  {c.name:<24} {'ok' if c.ok else 'FAIL':<5} {c.state}" + (f": {c.detail}" if c.detail else "")
                )
        problems = [c for c in checks if not c.ok]
        click.echo("healthy" if healthy else f"NOT HEALTHY: {len(problems)} problem(s)")
    if not healthy:
        ctx.exit(1)


def capture_checks(config: Any) -> list[Check]:
    from cdcsync.connectors.client import ConnectClient
    from cdcsync.connectors.watch import unrecoverable
    from cdcsync.errors import CdcsyncError
    from cdcsync.sync.lag_report import LagReader

    if not config.sources:
        return []
    lag: dict[str, Any] = {}
    lag_error = ""
    reader = LagReader(config, timeout_s=10)
    try:
        lag = {s.source: s for s in reader.report(followers=[]).sources}
    except CdcsyncError as err:
        lag_error = str(err)
    finally:
        reader.close()
    client = ConnectClient(config.connect.url, config.connect.timeout_s, retries=1)
    checks = []
    for source in config.sources:
        try:
            found = client.status(source.name)
        except CdcsyncError as err:
            checks.append(Check("capture", source.name, False, "unknown", str(err)))
            continue
        if found is None:
            missing = f"connector {source.name} is not registered; run `cdcsync connectors apply`"
            checks.append(Check("capture", source.name, False, "missing", missing))
            continue
        connector = found["connector"]["state"]
        tasks = found.get("tasks", [])
        running = sum(1 for t in tasks if t.get("state") == "RUNNING")
        state = f"{connector}, {running}/{len(tasks)} tasks running"
        ok = connector == "RUNNING" and bool(tasks) and running == len(tasks)
        notes = []
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        if failed:
            full = failed[0].get("trace") or ""
            trace, fix = full.strip().splitlines(), unrecoverable(full)
            first = trace[0][:300] if trace else "no trace"
            notes.append(f"task {failed[0].get('id')} FAILED: {f'not restartable: {fix}' if fix else first}")
        if not tasks:
            notes.append("no task")
        produced = lag.get(source.name)
        if produced is None:
            ok = False
            notes.append(f"heartbeat unreadable: {lag_error or 'no report'}")
        else:
            if produced.state in ("stalled", "no heartbeat"):
                ok = False
            age = produced.heartbeat_age_s
            notes.append(
                f"capture {produced.state}, heartbeat " + ("never seen" if age is None else f"{age:.1f} s ago")
            )
            if produced.retained_wal_bytes is not None:
                notes.append(f"slot {produced.slot} retains {produced.retained_wal_bytes} bytes of WAL")
        checks.append(Check("capture", source.name, ok, state, "; ".join(notes)))
    return checks


def read_daemon(url: str) -> dict[str, Any] | None:
    """The daemon's /healthz lines and follower states from /metrics; None when no daemon answers."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    try:
        health = requests.get(f"{url}/healthz", timeout=TIMEOUT_S)
        scraped = requests.get(f"{url}/metrics", timeout=TIMEOUT_S)
    except requests.RequestException:
        return None
    states: dict[str, str] = {}
    restarts: dict[str, int] = {}
    for family in text_string_to_metric_families(scraped.text):
        for sample in family.samples:
            if sample.name == "cdcsync_follower_state" and sample.value == 1:
                states[sample.labels["follower"]] = sample.labels["state"]
            elif sample.name == "cdcsync_follower_restarts_total":
                restarts[sample.labels["follower"]] = int(sample.value)
    lines = [line for line in health.text.splitlines() if line.strip()]
    return {"healthy": health.status_code == 200, "health": lines, "states": states, "restarts": restarts}


def follower_checks(config: Any, daemon: dict[str, Any] | None, url: str) -> list[Check]:
    from cdcsync.snapshot.reindex import killed_line
    from cdcsync.sync import held, reindex_needed
    from cdcsync.sync.verify import background

    checks = []
    for cfg in config.followers:
        killed = killed_line(config, cfg.name)
        if killed is not None:  # its store lacks a window, or is half switched, until the reindex is finished
            checks.append(Check("follower", cfg.name, False, "reindex unfinished", killed))
        for line in reindex_needed.lines(config, cfg.name):  # rows no change will fix (a RENAME COLUMN, a DEFAULT)
            checks.append(Check("follower", cfg.name, False, "reindex needed", line))
        for line in held.lines(config, cfg.name):  # a table its sink failed for alone (sync.held)
            checks.append(Check("follower", cfg.name, False, "table held", line))
        for table, result in sorted(background.last_results(config, cfg.name).items()):
            if background.divergent(result):  # the daemon's last background pass of the table found them
                ago = max(0.0, time.time() - float(result["ended_at"]))
                found = (
                    f"{table}: {background.divergent(result)} rows differ from the source (missing="
                    f"{result['missing_count']} stale={result['stale_count']} extra={result['extra_count']}) at the "
                    f"background pass that ended {ago / 60:.0f} min ago; "
                    f"run `cdcsync repair {cfg.name} --table {table}`"
                )
                checks.append(Check("follower", cfg.name, False, "diverged", found))
        if daemon is None:
            absent = f"no daemon answers at {url}; start `cdcsync run` (or pass --metrics-port)"
            checks.append(Check("follower", cfg.name, False, "not running", absent))
            continue
        state = daemon["states"].get(cfg.name)
        if state is None:
            checks.append(Check("follower", cfg.name, False, "not running", "the daemon there does not run it"))
            continue
        why = [line for line in daemon["health"] if line.startswith(f"follower {cfg.name} ")]
        detail = f"{daemon['restarts'].get(cfg.name, 0)} restarts" + (f"; {why[0]}" if why else "")
        checks.append(Check("follower", cfg.name, state == "running", state, detail))
    return checks


def sink_check(config: Any, cfg: Any) -> Check:
    """Whether the follower's store answers; errors are shown without the URL, which may hold credentials."""
    try:
        ok, state = _probe(config, cfg)
    except Exception as err:  # any failure to reach the store is the finding
        return Check("sink", cfg.name, False, f"{cfg.kind} unreachable", _redacted(f"{type(err).__name__}: {err}"))
    return Check("sink", cfg.name, ok, state)


def _probe(config: Any, cfg: Any) -> tuple[bool, str]:
    from cdcsync.sync.sinks import probe

    return probe(config, cfg, TIMEOUT_S)


def _redacted(text: str) -> str:
    return re.sub(r"(\w+://)[^/@\s]+@", r"\1***@", text)[:500]
