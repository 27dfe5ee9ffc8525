"""A follower added to a running system bootstraps and joins; the running followers are unaffected.

Operators run it like this: the daemon (`cdcsync run search cache`) keeps
going, the new follower is added to the config, `cdcsync bootstrap warehouse
--from source` fills it, and a second daemon runs just it. The source takes
writes throughout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import batches, daemon_config, start_daemon, verify_until_clean, wait_for_batches
from tests.integration.followers import drop_stores, follower_dicts
from tests.support import drop_capture, execute, source_dict, uid, wait_streaming


@pytest.mark.long  # three minutes; `make test` covers bootstrap under writes in tests/integration/test_bootstrap*.py
def test_a_new_follower_bootstraps_and_joins_a_running_system(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"join_{uid()}"
    execute(
        "postgres",
        f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)",
        f"INSERT INTO {table} SELECT g, g FROM generate_series(1, 2000) g",
    )
    search, cache, warehouse = follower_dicts(tag, tmp_path)
    doc, config_path, config = daemon_config(
        tmp_path, [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])], [search, cache]
    )
    running: list[subprocess.Popen] = []
    stop = threading.Event()
    try:
        apply(config)
        wait_streaming(config)

        def writes() -> None:
            i = 10_000
            while not stop.is_set():
                i += 1
                execute(
                    "postgres",
                    f"INSERT INTO {table} VALUES ({i}, {i})",
                    f"UPDATE {table} SET v = v + 1 WHERE id = {i % 2000 + 1}",
                )
                time.sleep(0.01)

        writer = threading.Thread(target=writes, daemon=True)
        writer.start()
        log = tmp_path / "run.log"
        running.append(start_daemon(config_path, log))
        before = wait_for_batches(log, ("search", "cache"))  # Spark up, the two followers streaming

        doc["followers"] = [search, cache, warehouse]  # the operator adds a follower
        config_path.write_text(yaml.safe_dump(doc))
        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path)]
        boot = subprocess.run(
            [*command, "bootstrap", "warehouse", "--from", "source", "--json"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert boot.returncode == 0, boot.stderr[-3000:]
        assert json.loads(boot.stdout)["applied"] >= 2000
        running.append(start_daemon(config_path, tmp_path / "run-warehouse.log"))
        # The first daemon never stopped and kept applying batches while the new follower was built.
        assert running[0].poll() is None
        assert all(batches(log, f) > before[f] for f in before), log.read_text()[-3000:]
        time.sleep(20)
        stop.set()
        writer.join()
        last = verify_until_clean(config_path)
        assert last.returncode == 0, last.stdout
        assert {r["follower"] for r in json.loads(last.stdout)} >= {"search", "cache", "warehouse"}
        for daemon in running:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(60) == 0
        running.clear()
    finally:
        stop.set()
        for daemon in running:
            os.killpg(daemon.pid, signal.SIGKILL)
        drop_capture(config)
        drop_stores(config, tag)
        execute("postgres", f"DROP TABLE IF EXISTS {table}")
