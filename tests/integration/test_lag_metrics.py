"""The daemon's /metrics during a workload: lag rises while a follower's sink is down, returns to 0 after.

A real `cdcsync run` process follows a Postgres table into a Redis server
this test starts for itself (the stack's own Redis is never stopped), so the
sink can be taken away and brought back. The lag gauges come from the
daemon's collector (every ~10 s); the applied counter must equal the changes
written: each is an insert of a new key, so none is superseded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cdcsync import __version__
from cdcsync.config.file import load_config
from cdcsync.connectors.apply import apply
from cdcsync.connectors.topics import delete_topics
from tests.support import ENV, drop_capture, execute, source_dict, uid, wait_streaming


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int, data: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
         "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.2)
    server.kill()
    raise AssertionError(f"redis-server did not listen on {port}")


def start_daemon(
    config_path: Path, log: Path, metrics_port: int, *followers: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "run", *followers],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "CDCSYNC_METRICS_PORT": str(metrics_port), **(env or {})},
        start_new_session=True,
    )


def notify_socket() -> socket.socket:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET (a short path: Unix socket paths are short)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(Path(tempfile.mkdtemp(prefix="cdcsync-sd-")) / "notify"))
    sock.setblocking(False)
    return sock


def notified(sock: socket.socket) -> list[str]:
    """Every state line the daemon sent so far."""
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the daemon's /metrics: (name, sorted labels) -> value; empty while it does not answer."""
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.RequestException:
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def applied(samples: dict[Any, float], follower: str) -> float:
    return sum(
        v for (name, labels), v in samples.items()
        if name == "cdcsync_changes_applied_total" and dict(labels).get("follower") == follower
    )  # fmt: skip


def wait_for(what: str, port: int, holds: Callable[[dict[Any, float]], bool], log: Path, within_s: float) -> dict:
    deadline = time.monotonic() + within_s
    samples = scrape(port)
    while not holds(samples):
        if time.monotonic() > deadline:
            lag = {k: v for k, v in samples.items() if "behind" in k[0] or "applied" in k[0] or "state" in k[0]}
            raise AssertionError(f"{what}: not within {within_s} s; metrics {lag}\n{log.read_text()[-3000:]}")
        time.sleep(2)
        samples = scrape(port)
    return samples


def insert(table: str, first: int, count: int, spread_s: float) -> None:
    """Insert ids first..first+count-1, ten per transaction, spread over about ``spread_s`` seconds."""
    for start in range(first, first + count, 10):
        rows = ", ".join(f"({i}, {i})" for i in range(start, min(start + 10, first + count)))
        execute("postgres", f"INSERT INTO {table} VALUES {rows}")
        time.sleep(spread_s / (count / 10))


def test_metrics_show_lag_while_the_sink_is_down_and_zero_after(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"lagm_{uid()}"
    redis_port, metrics_port = free_port(), free_port()
    execute("postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)")
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])],
        "followers": [
            {
                "name": "cache",
                "kind": "redis",
                "url": f"redis://127.0.0.1:{redis_port}/0",
                "prefix": tag,
                "dead_letter_topic": f"dlq.{tag}.cache",
                "checkpoint_dir": str(tmp_path / "ckpt-cache"),
                "sink_attempts": 1,  # a batch fails at once while Redis is down: none half-written
            }
        ],
        "state_dir": str(tmp_path),
    }
    config_path = tmp_path / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    config = load_config(config_path)
    topic = config.sources[0].topic(config.sources[0].tables[0])
    log = tmp_path / "run.log"
    (tmp_path / "redis").mkdir()
    redis_server = start_redis(redis_port, tmp_path / "redis")
    daemon = None
    try:
        apply(config)
        wait_streaming(config)
        systemd = notify_socket()
        # As systemd runs it (deploy/systemd/cdcsync.service): Type=notify, a watchdog of 2 s, petted every 1 s.
        sd_env = {"NOTIFY_SOCKET": systemd.getsockname(), "WATCHDOG_USEC": "2000000"}
        daemon = start_daemon(config_path, log, metrics_port, env=sd_env)

        def lag(samples: dict[Any, float]) -> tuple[float | None, float | None]:
            return (
                value(samples, "cdcsync_follower_offsets_behind", follower="cache", topic=topic, partition="0"),
                value(samples, "cdcsync_follower_seconds_behind", follower="cache", table=f"public.{table}"),
            )

        insert(table, 1, 200, spread_s=3)
        samples = wait_for(
            "the first 200 applied, lag 0",
            metrics_port,
            lambda s: applied(s, "cache") == 200 and lag(s) == (0.0, 0.0),
            log,
            within_s=300,
        )
        assert value(samples, "cdcsync_follower_state", follower="cache", state="running") == 1
        build = [labels for (name, labels), v in samples.items() if name == "cdcsync_build_info" and v == 1]
        assert len(build) == 1 and ("version", __version__) in build[0]
        states = notified(systemd)
        assert states[0] == "READY=1" and states.count("WATCHDOG=1") >= 2, states
        assert value(samples, "cdcsync_capture_lag_seconds", source=f"{tag}_pg") is not None
        wal = value(samples, "cdcsync_slot_retained_wal_bytes", source=f"{tag}_pg", slot=f"cdcsync_{tag}_pg")
        assert wal is not None and wal >= 0

        # The sink goes away between batches; the source keeps changing.
        redis_server.terminate()
        redis_server.wait(30)
        insert(table, 201, 200, spread_s=4)
        samples = wait_for(
            "lag while Redis is down",
            metrics_port,
            lambda s: (lag(s)[0] or 0) >= 200 and (lag(s)[1] or 0) > 2,
            log,
            within_s=120,
        )
        assert applied(samples, "cache") == 200  # nothing more could be applied

        redis_server = start_redis(redis_port, tmp_path / "redis")
        samples = wait_for(
            "caught up after Redis is back",
            metrics_port,
            lambda s: applied(s, "cache") == 400 and lag(s) == (0.0, 0.0),
            log,
            within_s=300,
        )
        assert value(samples, "cdcsync_dead_letters_total", follower="cache") == 0
        assert notified(systemd).count("WATCHDOG=1") >= 5  # petted all along, Redis down or not
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
        daemon = None
        assert notified(systemd)[-1] == "STOPPING=1"
    finally:
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGKILL)
        redis_server.kill()
        drop_capture(config)
        delete_topics(config, [f.dlq_topic for f in config.followers])
        execute("postgres", f"DROP TABLE IF EXISTS {table}")
