"""A sink that stops answering mid-batch: the batch is named, cancelled at its deadline, and the follower heals.

The cache follower writes to a Redis server of this test's own whose writes
are held (``CLIENT PAUSE ... WRITE``: the connection stays open, nothing is
answered), as a server stuck on a full disk would. Its batch makes no
progress; ``/healthz`` must name the follower as behind and not applying,
and the daemon must cancel the batch within twice its deadline
(``sync.deadline``) and restart the follower alone, while the search
follower converges. Once Redis answers again, both stores equal the source.
Prints the time to detect and the time to converge.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import redis

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import daemon_config, free_port, own_redis, running_daemon, stop_daemon, verify_until_clean
from tests.integration.followers import follower_dicts, tear_down
from tests.support import execute, source_dict, uid, wait_streaming

DEADLINE_S = 20.0
PAUSE_MS = 1_000_000  # longer than the test: it ends with CLIENT UNPAUSE
CANCELLED = re.compile(r"follower=cache batch \d+ made no progress for \d+ s \(deadline 20 s\): cancelled")


def healthz(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as err:  # 503 while unhealthy, with the reasons
        return str(err.read().decode())
    except OSError:
        return ""


def test_a_hung_sink_is_detected_cancelled_and_healed_alone(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"hang_{uid()}"
    execute(
        "postgres",
        f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)",
        f"INSERT INTO {table} SELECT g, g FROM generate_series(1, 200) g",
    )
    search, cache, _warehouse = follower_dicts(tag, tmp_path)
    config = None
    with own_redis(tmp_path) as (redis_port, _restart):
        cache = {**cache, "url": f"redis://127.0.0.1:{redis_port}/0", "batch_deadline_s": DEADLINE_S}
        sources = [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])]
        _, config_path, config = daemon_config(tmp_path, sources, [search, cache])
        _, only_search, _ = daemon_config(tmp_path, sources, [search], name="search.yaml")
        log, port = tmp_path / "run.log", free_port()
        try:
            apply(config)
            wait_streaming(config)
            with running_daemon(config_path, log, port) as daemon:
                assert verify_until_clean(config_path, within_s=240).returncode == 0, log.read_text()[-3000:]
                held = redis.Redis(port=redis_port)
                held.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
                hung = time.monotonic()
                execute("postgres", f"UPDATE {table} SET v = -v WHERE id % 3 = 0", f"DELETE FROM {table} WHERE id = 5")

                named = cancelled = None
                while cancelled is None and time.monotonic() - hung < 4 * DEADLINE_S + 60:
                    if named is None and "cache behind and not applying" in healthz(port):
                        named = time.monotonic() - hung
                    if CANCELLED.search(log.read_text(errors="replace")):
                        cancelled = time.monotonic() - hung
                    time.sleep(1)
                text = log.read_text(errors="replace")
                assert named is not None, "/healthz never named the hung follower: " + text[-3000:]
                assert cancelled is not None, "the hung batch was never cancelled: " + text[-4000:]
                # The batch started at most a trigger after the writes; it is cancelled within twice its deadline.
                assert cancelled <= 2 * DEADLINE_S + 10, (cancelled, text[-3000:])
                assert daemon.poll() is None, text[-3000:]
                assert verify_until_clean(only_search, within_s=120).returncode == 0, "search stalled behind it"

                held.execute_command("CLIENT", "UNPAUSE")
                back = time.monotonic()
                last = verify_until_clean(config_path, within_s=180)
                healed = time.monotonic() - back
                assert last.returncode == 0, (last.stdout[-3000:], log.read_text()[-4000:])
                print(
                    f"\nhung batch: named at /healthz after {named:.1f} s, cancelled after {cancelled:.1f} s "
                    f"(deadline {DEADLINE_S:.0f} s); every store clean {healed:.1f} s after the sink answered"
                )
                stop_daemon(daemon, log)
        finally:  # own_redis resumes and stops its server after this
            tear_down(config, tag, None, {table: "postgres"})
