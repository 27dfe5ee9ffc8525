"""deploy/monitoring: promtool checks and tests the rules, and every metric name used is one cdcsync exports.

promtool comes with Debian's ``prometheus`` package (deploy/local/install.sh
installs it). Without it these tests skip locally and fail under CI=true.
The metric names are parsed out of the PromQL of the rules and the dashboard
and compared with the metrics defined in ``cdcsync.metrics``, with the
sample suffixes Prometheus gives each type (``_total`` of a counter,
``_bucket``/``_sum``/``_count`` of a histogram).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from cdcsync import metrics
from tests.tools import required

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy/monitoring"
RULES = MONITORING / "rules.yml"
DASHBOARD = MONITORING / "grafana/dashboards/cdcsync.json"
NOT_OURS = {"up": "Prometheus's own series per scrape target (the daemon down)"}
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
KEYWORDS |= {"inf", "nan"}


def promtool(*args: str) -> subprocess.CompletedProcess:
    tool = required("promtool", "prometheus")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=REPO)


# --------------------------------------------------------------------------- promtool


@pytest.mark.parametrize(
    "args",
    [
        ("check", "config", "deploy/monitoring/prometheus.yml"),
        ("check", "rules", "deploy/monitoring/rules.yml"),
        ("test", "rules", "deploy/monitoring/tests.yml"),
    ],
    ids=" ".join,
)
def test_promtool(args: tuple[str, ...]) -> None:
    done = promtool(*args)
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"


def test_every_alert_has_a_rule_test_that_fires_it() -> None:
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((MONITORING / "tests.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case.get("exp_alerts")}
    quiet = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if not case["exp_alerts"]}
    assert alerts - fired == set(), f"alerts no test sees firing: {sorted(alerts - fired)}"
    assert alerts - quiet == set(), f"alerts no test sees quiet: {sorted(alerts - quiet)}"


def test_compose_runs_the_prometheus_promtool_tested_the_rules_with() -> None:
    done = promtool("--version")
    version = re.search(r"version (\d+\.\d+)", done.stdout + done.stderr)
    assert version, done.stdout + done.stderr
    image = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["prometheus"]["image"]
    assert re.search(rf":v{re.escape(version[1])}\.\d+$", image), f"compose runs {image}, promtool is {version[1]}"


# --------------------------------------------------------------------------- metric names


def exported() -> dict[str, str]:
    """Every sample name cdcsync's metrics produce -> the metric defining it."""
    out = {}
    for metric in vars(metrics).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        family = metric.describe()[0]
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}[family.type]
        for suffix in suffixes:
            out[family.name + suffix] = family.name
    return out


def names_in(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (not functions, keywords, labels or Grafana variables)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\$\w+", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    found = set()
    for match in re.finditer(r"(?<![\w.])[a-zA-Z_:][\w:]*", expr):
        if not expr[match.end() :].lstrip().startswith("(") and match.group() not in KEYWORDS:
            found.add(match.group())
    return found


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels") or [])


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel query and template variable."""
    doc = json.loads(DASHBOARD.read_text())
    out = [(f"panel {p['title']!r}", t["expr"]) for p in panels(doc["panels"]) for t in p.get("targets") or []]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            metric = re.fullmatch(r"label_values\((\w+),\s*\w+\)", var["definition"])
            assert metric, f"variable {var['name']}: {var['definition']!r} is not label_values(metric, label)"
            out.append((f"variable {var['name']}", metric[1]))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(f"alert {rule['alert']}", rule["expr"]) for group in groups for rule in group["rules"]]


def test_names_in_reads_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (follower, le) (rate(cdcsync_apply_latency_seconds_bucket{follower=~"$f"}'
        '[$__rate_interval]))) > 1e3 and on (follower) time() - x_seconds offset 5m unless up{job="a b"} == bool 0'
    )
    assert names_in(expr) == {"cdcsync_apply_latency_seconds_bucket", "x_seconds", "up"}


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_name_used_is_exported(source: str) -> None:
    known = exported()
    assert "cdcsync_changes_applied_total" in known and "cdcsync_apply_latency_seconds_bucket" in known
    exprs = rule_exprs() if source == "rules" else dashboard_exprs()
    unknown = [
        f"{where}: {name}"
        for where, expr in exprs
        for name in sorted(names_in(expr))
        if name not in known and name not in NOT_OURS
    ]
    assert not unknown, "not exported by cdcsync.metrics:\n" + "\n".join(unknown)


def test_the_dashboard_shows_every_metric_cdcsync_exports() -> None:
    used = {exported().get(name) for _, expr in dashboard_exprs() for name in names_in(expr)}
    missing = set(exported().values()) - used - set(metrics.OLD_NAMES)  # an old name: its metric's panel shows it
    assert not missing, f"metrics with no dashboard panel (add one to {DASHBOARD.relative_to(REPO)}): {sorted(missing)}"


def test_an_old_name_repeats_its_metric_and_no_panel_or_rule_reads_it() -> None:
    shapes = {
        metric.describe()[0].name: (metric.describe()[0].type, metric._labelnames)
        for metric in vars(metrics).values()
        if isinstance(metric, MetricWrapperBase)
    }
    for old, new in metrics.OLD_NAMES.items():
        assert old in shapes and shapes.get(old) == shapes.get(new), f"{old} does not repeat {new}'s type and labels"
    read = {name for _, expr in rule_exprs() + dashboard_exprs() for name in names_in(expr)} & set(metrics.OLD_NAMES)
    assert not read, f"old names a panel or rule reads (read their metric instead): {sorted(read)}"


def test_dashboard_panels_are_distinct_and_use_the_chosen_data_source() -> None:
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in panels(doc["panels"])]
    assert len(ids) == len(set(ids)), f"repeated panel ids: {ids}"
    for panel in panels(doc["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", f"{panel['title']}: not on the $datasource variable"
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, f"{panel['title']}: wider than the dashboard"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), f"{panel['title']}: repeated refId"


def test_dashboard_promql_parses(tmp_path: Path) -> None:
    """Each panel query, Grafana's variables filled in, as a recording rule promtool checks."""
    fill = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$follower": ".*", "$source": ".*"}
    rules = []
    for i, (where, expr) in enumerate(dashboard_exprs()):
        for variable, value in fill.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{where}: a variable this test does not fill: {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_lists_every_metric_cdcsync_exports_with_its_type_and_labels() -> None:
    rows = re.findall(r"^\| `(cdcsync_\w+)` \| (\w+) \| ([^|]*) \|", (REPO / "README.md").read_text(), re.MULTILINE)
    listed = {name: (kind, [part.strip() for part in labels.split(",") if part.strip()]) for name, kind, labels in rows}
    defined = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            family = metric.describe()[0]
            name = family.name + ("_total" if family.type == "counter" else "")
            defined[name] = (family.type, list(metric._labelnames))
    assert listed == defined, "README.md's metric table and cdcsync.metrics differ"


def test_every_alert_links_its_runbook_in_docs_operations() -> None:
    lines = (REPO / "docs/operations.md").read_text().splitlines()
    headings = {line[4:].strip().lower() for line in lines if line.startswith("### ")}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"].get("runbook_url", "")
            assert url == f"docs/operations.md#{rule['alert'].lower()}", rule["alert"]
            assert rule["alert"].lower() in headings, f"docs/operations.md has no runbook for {rule['alert']}"
