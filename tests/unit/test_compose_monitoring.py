"""The prometheus and grafana compose services: what they mount, what they scrape, where they listen."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.compose_support import (
    MONITORING,
    REPO,
    command,
    daemon_metrics_address,
    environment,
    flags,
    mounts,
    service,
    stack_env,
)


def listen_address(name: str) -> tuple[str, int]:
    if name == "prometheus":
        address = flags(command("prometheus")).get("web.listen-address") or ":9090"
        host, _, port = address.rpartition(":")
        return host, int(port)
    env = environment("grafana")
    return env.get("GF_SERVER_HTTP_ADDR", ""), int(env.get("GF_SERVER_HTTP_PORT", 3000))


def test_monitoring_shares_the_host_network_and_listens_on_loopback_only() -> None:
    taken = {int(v) for k, v in stack_env().items() if k.endswith("_PORT") and v.isdigit()}
    taken.add(daemon_metrics_address()[1])
    seen = set()
    for name in sorted(MONITORING):
        spec = service(name)
        image = str(spec.get("image", ""))
        assert ":" in image and not image.endswith(":latest"), f"{name}: image {image!r} is not pinned to a version"
        assert spec.get("network_mode") == "host", f"{name}: needs network_mode: host to reach the daemon's loopback"
        assert not spec.get("ports"), f"{name}: host networking publishes nothing; drop `ports`"
        host, port = listen_address(name)
        assert host == "127.0.0.1", f"{name}: listens on {host or 'every address'!r}, not loopback"
        assert port not in taken | seen, f"{name}: port {port} is taken by the stack, the daemon or the other service"
        seen.add(port)


def test_prometheus_runs_the_repository_config_and_rules_and_scrapes_the_daemon() -> None:
    mounted = mounts("prometheus")
    config_path = flags(command("prometheus")).get("config.file") or "/etc/prometheus/prometheus.yml"
    assert mounted.get(config_path) == (REPO / "deploy/monitoring/prometheus.yml").resolve(), (
        f"prometheus: --config.file {config_path} is not deploy/monitoring/prometheus.yml ({mounted})"
    )
    config = yaml.safe_load(mounted[config_path].read_text())
    here = Path(config_path).parent
    for rule_file in config.get("rule_files") or []:
        inside = str(here / rule_file)
        assert inside in mounted, f"prometheus: rule file {rule_file} ({inside}) is not mounted"
        assert mounted[inside] == (mounted[config_path].parent / rule_file).resolve(), f"prometheus: {inside} wrong"
    targets = [t for job in config["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]]
    want = "{}:{}".format(*daemon_metrics_address())
    assert want in targets, f"prometheus.yml scrapes {targets}, not the daemon's default {want}"


def test_grafana_is_provisioned_with_the_repository_dashboard_and_prometheus() -> None:
    mounted = mounts("grafana")
    provisioning = {target.rsplit("/", 1)[1]: path for target, path in mounted.items()
                    if target.startswith("/etc/grafana/provisioning/")}  # fmt: skip
    assert set(provisioning) == {"datasources", "dashboards"}, f"grafana: provisioning mounts {provisioning}"
    datasources = [yaml.safe_load(f.read_text()) for f in provisioning["datasources"].glob("*.yml")]
    urls = [d["url"] for doc in datasources for d in doc["datasources"] if d["type"] == "prometheus"]
    assert urls == ["http://{}:{}".format(*listen_address("prometheus"))], f"grafana: Prometheus data source {urls}"
    providers = [
        p for f in provisioning["dashboards"].glob("*.yml") for p in yaml.safe_load(f.read_text())["providers"]
    ]
    for provider in providers:
        folder = mounted.get(provider["options"]["path"])
        assert folder is not None and any(folder.glob("*.json")), f"grafana: {provider['options']['path']} is empty"
    home = environment("grafana").get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH", "")
    base, _, file = home.rpartition("/")
    assert base in mounted and (mounted[base] / file).exists(), f"grafana: home dashboard {home!r} is not mounted"
    depends = service("grafana").get("depends_on") or {}
    assert (depends.get("prometheus") or {}).get("condition") == "service_healthy", "grafana: wait for prometheus"
