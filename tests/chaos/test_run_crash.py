"""`cdcsync run` killed with SIGKILL mid-stream, then restarted: every store converges.

The daemon runs as a real process (its own Spark driver) from a YAML config,
the way an operator runs it; the source takes writes throughout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from cdcsync.config import load_config
from cdcsync.connectors.apply import apply
from tests.integration.followers import drop_stores, follower_dicts
from tests.support import ENV, drop_capture, execute, source_dict, uid, wait_streaming


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_daemon(config_path: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "CDCSYNC_METRICS_PORT": str(free_port())}
    return subprocess.Popen(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "run"],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def verify(config_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "verify", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )


def verify_until_clean(config_path: Path, within_s: float = 300) -> subprocess.CompletedProcess:
    """``cdcsync verify`` every 5 s until it exits 0 (the followers caught up) or time runs out; the last run."""
    deadline = time.monotonic() + within_s
    last = verify(config_path)
    while last.returncode != 0 and time.monotonic() < deadline:
        time.sleep(5)
        last = verify(config_path)
    return last


def test_run_sigkill_and_restart_converges(tmp_path: Path) -> None:
    tag = f"t{uid()}"
    table = f"crash_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)")
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])],
        "followers": follower_dicts(tag, tmp_path),
        "state_dir": str(tmp_path),
    }
    config_path = tmp_path / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    config = load_config(config_path)
    log = tmp_path / "run.log"
    daemon = None
    try:
        apply(config)
        wait_streaming(config)
        stop = threading.Event()

        def writes() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                execute(
                    "postgres",
                    f"INSERT INTO {table} VALUES ({i}, {i})",
                    f"UPDATE {table} SET v = -v WHERE id = {max(1, i // 2)}",
                )
                time.sleep(0.01)

        writer = threading.Thread(target=writes)
        writer.start()
        daemon = start_daemon(config_path, log)
        time.sleep(45)  # Spark up and a few batches applied
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(30)
        time.sleep(5)  # writes continue while the daemon is dead
        daemon = start_daemon(config_path, log)
        time.sleep(10)
        stop.set()
        writer.join()

        last = verify_until_clean(config_path)
        assert last.returncode == 0, (last.stdout, log.read_text()[-3000:])
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, log.read_text()[-3000:]
        daemon = None
    finally:
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGKILL)
        drop_capture(config)
        drop_stores(config, tag)
        execute("postgres", f"DROP TABLE IF EXISTS {table}")
