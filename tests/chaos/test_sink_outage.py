"""A sink that hangs, then dies, under a running daemon: its follower waits it out, the others never stop.

The cache follower writes to a Redis server of this test's own (so the shared
one stays up for everything else): it is frozen with SIGSTOP (a hung server,
not a refused connection), resumed, then killed with SIGKILL and restarted from
its append-only file. Meanwhile the search follower must keep applying, and the
daemon must never exit; after the writes stop every store equals the source.

In ``make chaos``: ``make test`` plays a hung sink with
tests/chaos/test_batch_deadline.py (a batch past its deadline, cancelled and
healed) and tests/chaos/test_hung_follower_behind.py (a follower behind whose
sink hangs).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import daemon_config, free_port, own_redis, start_daemon, verify_until_clean
from tests.integration.followers import drop_stores, follower_dicts
from tests.support import drop_capture, execute, source_dict, uid, wait_streaming

OUTAGE_S = float(os.environ.get("CDCSYNC_CHAOS_OUTAGE_S", "75"))


def healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.long
def test_a_hung_then_killed_sink_is_waited_out_while_the_other_follower_keeps_going(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"outage_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL, body TEXT)")
    search, cache, _warehouse = follower_dicts(tag, tmp_path)
    with own_redis(tmp_path) as (redis_port, restart_redis):
        # Two attempts per batch: the dead server outlasts them, the query fails and the supervisor restarts it.
        cache = {**cache, "url": f"redis://127.0.0.1:{redis_port}/0", "sink_attempts": 2}
        sources = [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])]
        _, config_path, config = daemon_config(tmp_path, sources, [search, cache])
        _, only_search, _ = daemon_config(tmp_path, sources, [search], name="search.yaml")
        log, metrics_port = tmp_path / "run.log", free_port()
        daemon = None
        stop, paused = threading.Event(), threading.Event()
        try:
            apply(config)
            wait_streaming(config)

            def writes() -> None:
                i = 0
                while not stop.is_set():
                    if paused.is_set():
                        time.sleep(0.1)
                        continue
                    i += 1
                    body = "x" * 30_000 if i % 20 == 0 else "row"  # some wide rows
                    execute(
                        "postgres",
                        f"INSERT INTO {table} VALUES ({i}, {i}, '{body}')",
                        f"UPDATE {table} SET v = -v WHERE id = {max(1, i // 2)}",
                        f"DELETE FROM {table} WHERE id = {max(1, i - 50)} AND id % 7 = 0",
                    )
                    time.sleep(0.01)

            writer = threading.Thread(target=writes)
            writer.start()
            daemon = start_daemon(config_path, log, metrics_port)
            deadline = time.monotonic() + 180
            while log.read_text(errors="replace").count("follower=cache batch=") == 0:
                assert time.monotonic() < deadline and daemon.poll() is None, log.read_text()[-3000:]
                time.sleep(2)

            pid = int(redis.Redis(port=redis_port).info("server")["process_id"])
            os.kill(pid, signal.SIGSTOP)  # hung, not refusing: clients wait on their socket
            time.sleep(OUTAGE_S / 2)
            paused.set()
            time.sleep(2)
            # The search follower kept applying while the cache's server hung.
            last = verify_until_clean(only_search, within_s=OUTAGE_S)
            assert last.returncode == 0, (last.stdout[-2000:], log.read_text()[-3000:])
            paused.clear()
            time.sleep(OUTAGE_S / 2)
            os.kill(pid, signal.SIGCONT)
            time.sleep(5)
            os.kill(pid, signal.SIGKILL)  # and now dead: refused connections for a while
            deadline = time.monotonic() + 120
            while "follower=cache state=restarting" not in log.read_text(errors="replace"):
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(2)
            status, body = healthz(metrics_port)
            assert status == 503 and "follower cache restarting" in body, (status, body)
            assert "follower search" not in body
            time.sleep(10)
            restart_redis()
            time.sleep(10)
            stop.set()
            writer.join()

            last = verify_until_clean(config_path, within_s=420)
            assert last.returncode == 0, (last.stdout[-3000:], log.read_text()[-4000:])
            assert daemon.poll() is None, "the daemon exited: " + log.read_text()[-3000:]
            assert healthz(metrics_port)[0] == 200
            scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            assert 'cdcsync_follower_state{follower="search",state="running"} 1.0' in scraped
            assert 'cdcsync_follower_restarts_total{follower="search"}' not in scraped
            restarts = re.search(r'cdcsync_follower_restarts_total\{follower="cache"\} (\S+)', scraped)
            assert restarts and float(restarts.group(1)) >= 1, scraped
            # The cache's writes ran on Spark's Python workers; their retries reach the daemon's /metrics.
            retries = re.search(r'cdcsync_sink_retries_total\{follower="cache"\} (\S+)', scraped)
            assert retries and float(retries.group(1)) >= 1, scraped
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(120) == 0, log.read_text()[-3000:]
            daemon = None
        finally:
            stop.set()
            if daemon is not None:
                os.killpg(daemon.pid, signal.SIGKILL)
            drop_capture(config)
            drop_stores(config, tag)
            execute("postgres", f"DROP TABLE IF EXISTS {table}")
