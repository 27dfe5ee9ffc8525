"""`cdcsync run` killed with SIGKILL mid-stream, then restarted: every store converges.

The daemon runs as a real process (its own Spark driver) from a YAML config,
the way an operator runs it; the source takes writes throughout. The kill -9
matrix's ``kill-run`` row does the same under both databases and wide rows, so
``make test`` runs that one and leaves this narrower one to ``make chaos``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import daemon_config, start_daemon, verify_until_clean, wait_for_batches
from tests.integration.followers import follower_dicts, tear_down
from tests.support import execute, source_dict, uid, wait_streaming


@pytest.mark.long
def test_run_sigkill_and_restart_converges(tmp_path: Path) -> None:
    tag = f"t{uid()}"
    table = f"crash_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)")
    _, config_path, config = daemon_config(
        tmp_path, [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])], follower_dicts(tag, tmp_path)
    )
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
        tear_down(config, tag, daemon, {table: "postgres"})


@pytest.mark.long
def test_the_spark_driver_jvm_dying_ends_the_daemon_with_exit_1_and_says_why(tmp_path: Path) -> None:
    """An OutOfMemoryError ends the driver JVM; every follower runs in it. The daemon used to die on a Py4J
    traceback from its supervisor loop; now one CRITICAL line says what happened, and exit 1 lets the
    service manager (deploy/systemd) restart it."""
    tag, table = f"t{uid()}", f"jvm_{uid()}"
    execute(
        "postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)", f"INSERT INTO {table} VALUES (1, 1)"
    )
    search = follower_dicts(tag, tmp_path)[0]
    _, config_path, config = daemon_config(
        tmp_path, [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])], [search]
    )
    log, daemon = tmp_path / "run.log", None
    try:
        apply(config)
        wait_streaming(config)
        daemon = start_daemon(config_path, log)
        wait_for_batches(log, ("search",))
        jvm = subprocess.run(["pgrep", "-P", str(daemon.pid), "java"], capture_output=True, text=True).stdout.split()
        assert len(jvm) == 1, jvm
        os.kill(int(jvm[0]), signal.SIGKILL)
        assert daemon.wait(60) == 1, log.read_text()[-3000:]
        daemon = None
        assert "CRITICAL cdcsync.run the Spark driver JVM died" in log.read_text(), log.read_text()[-3000:]
    finally:
        tear_down(config, tag, daemon, {table: "postgres"})
