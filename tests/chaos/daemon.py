"""Harness for tests that run `cdcsync run` as an operator does: a YAML config, a process, `verify` outside."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
import yaml

from cdcsync.config import Config
from cdcsync.config.file import load_config
from tests.support import ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemon_config(
    tmp: Path, sources: list[dict[str, Any]], followers: list[dict[str, Any]], name: str = "cdcsync.yaml"
) -> tuple[dict[str, Any], Path, Config]:
    """A config for the local stack written to ``tmp/name``: the document, its path and the loaded config."""
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": sources,
        "followers": followers,
        "state_dir": str(tmp),
    }
    path = tmp / name
    path.write_text(yaml.safe_dump(doc))
    return doc, path, load_config(path)


def start_daemon(config_path: Path, log: Path, metrics_port: int | None = None) -> subprocess.Popen:
    env = {**os.environ, "CDCSYNC_METRICS_PORT": str(metrics_port or free_port())}
    return subprocess.Popen(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "run"],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


@contextmanager
def running_daemon(config_path: Path, log: Path, metrics_port: int | None = None) -> Iterator[subprocess.Popen]:
    """``cdcsync run`` for the block; killed at its end unless ``stop_daemon`` stopped it."""
    daemon = start_daemon(config_path, log, metrics_port)
    try:
        yield daemon
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(30)


def stop_daemon(daemon: subprocess.Popen, log: Path) -> None:
    """SIGTERM, as systemd stops it: the daemon must stop its followers between batches and exit 0."""
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(120) == 0, log.read_text(errors="replace")[-3000:]


def verify(config_path: Path) -> subprocess.CompletedProcess:
    """``cdcsync verify --json``; each run's exit code and counts are appended to ``verify.log`` beside the config."""
    done = subprocess.run(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "verify", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        counts = [(r["follower"], r["source_rows"], r["store_rows"], r["clean"]) for r in json.loads(done.stdout)]
    except (json.JSONDecodeError, KeyError, TypeError):
        counts = [done.stderr[-500:]]  # type: ignore[list-item]
    with open(config_path.parent / "verify.log", "a") as out:
        out.write(f"{time.strftime('%H:%M:%S')} exit={done.returncode} {counts}\n")
    return done


def verify_until_clean(config_path: Path, within_s: float = 300) -> subprocess.CompletedProcess:
    """``cdcsync verify`` every 5 s until it exits 0 (the followers caught up) or time runs out; the last run."""
    deadline = time.monotonic() + within_s
    last = verify(config_path)
    while last.returncode != 0 and time.monotonic() < deadline:
        time.sleep(5)
        last = verify(config_path)
    return last


def batches(log: Path, follower: str) -> int:
    return log.read_text(errors="replace").count(f"follower={follower} batch=")


def wait_for_batches(log: Path, followers: tuple[str, ...], within_s: float = 180) -> dict[str, int]:
    """Wait until every follower logged a batch (a first batch starts Spark's Python workers); the counts."""
    deadline = time.monotonic() + within_s
    counts = {f: batches(log, f) for f in followers}
    while not all(counts.values()) and time.monotonic() < deadline:
        time.sleep(2)
        counts = {f: batches(log, f) for f in followers}
    assert all(counts.values()), log.read_text()[-3000:]
    return counts


@contextmanager
def own_redis(tmp: Path) -> Iterator[tuple[int, Any]]:
    """A redis-server on a free port, durable (AOF); yields its port and a function that (re)starts it."""
    port, data = free_port(), tmp / "redis"
    data.mkdir()
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--appendonly", "yes",
             "--save", "", "--maxmemory-policy", "noeviction"],
            stdout=open(tmp / "redis.log", "ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(proc)
        deadline = time.monotonic() + 30
        while True:
            try:
                if redis.Redis(port=port).ping():
                    return proc
            except redis.ConnectionError:
                assert time.monotonic() < deadline, (tmp / "redis.log").read_text()
                time.sleep(0.2)

    start()
    try:
        yield port, start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
