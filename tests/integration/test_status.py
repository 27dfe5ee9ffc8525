"""`cdcsync status --json` against the real stack and a running daemon: 0 when healthy, 1 naming a missing connector."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from cdcsync.config.file import load_config
from cdcsync.connectors.apply import apply, client_for
from tests.integration.followers import follower_dicts, tear_down
from tests.integration.test_lag_metrics import free_port, start_daemon
from tests.support import ENV, execute, source_dict, uid, wait_streaming


def status(config_path: Path, metrics_port: int) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "status", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CDCSYNC_METRICS_PORT": str(metrics_port)},
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_status_healthy_then_a_missing_connector_is_named(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"stat_{uid()}"
    execute(
        "postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)", f"INSERT INTO {table} VALUES (1, 1)"
    )
    followers = [f for f in follower_dicts(tag, tmp_path) if f["name"] in ("search", "cache")]
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])],
        "followers": followers,
        "state_dir": str(tmp_path),
    }
    config_path = tmp_path / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    config = load_config(config_path)
    source = f"{tag}_pg"
    metrics_port = free_port()
    log = tmp_path / "run.log"
    daemon = None
    try:
        # No daemon yet: the followers are not running, and status says so.
        code, report = status(config_path, metrics_port)
        assert code == 1 and report["daemon"]["answers"] is False
        assert {c["name"] for c in report["checks"] if c["part"] == "follower" and not c["ok"]} == {"search", "cache"}

        apply(config)
        wait_streaming(config)
        daemon = start_daemon(config_path, log, metrics_port)
        deadline = time.monotonic() + 300
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{metrics_port}/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(2)

        code, report = status(config_path, metrics_port)
        assert code == 0, report["problems"]
        assert report["healthy"] and report["problems"] == []
        checks = {(c["part"], c["name"]): c for c in report["checks"]}
        assert checks[("capture", source)]["state"] == "RUNNING, 1/1 tasks running"
        assert "heartbeat" in checks[("capture", source)]["detail"]
        assert checks[("follower", "search")]["state"] == "running"
        assert checks[("follower", "cache")]["state"] == "running"
        assert checks[("sink", "search")]["state"].startswith("elasticsearch cluster ")
        assert checks[("sink", "cache")]["state"] == "redis answers PING"

        # The connector goes away: status fails and names it.
        client_for(config).delete(source)
        code, report = status(config_path, metrics_port)
        assert code == 1
        capture = checks_of(report)[("capture", source)]
        assert not capture["ok"] and capture["state"] == "missing"
        assert any(source in line and "not registered" in line for line in report["problems"]), report["problems"]

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
        daemon = None
    finally:
        tear_down(config, tag, daemon, {table: "postgres"})


def checks_of(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["part"], c["name"]): c for c in report["checks"]}
