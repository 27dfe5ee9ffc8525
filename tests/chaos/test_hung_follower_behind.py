"""A follower that is behind when its sink hangs holds task slots; the others must still find one free.

A follower behind reads full batches, and a full batch of a search or cache
follower runs as two tasks per core (``sync.batching.task_options``). If its
sink hangs, each of those tasks waits on its socket, holding its slot, for as
long as the sink's attempts last (minutes). The local master must keep a slot
free for the other followers whatever one of them holds (``cdcsync.spark``).
``test_sink_outage`` hangs a follower that keeps up, whose batches are one task
per core; this one hangs a follower with a backlog.

The cache follower writes to a Redis server of this test's own whose writes
are paused (``CLIENT PAUSE ... WRITE``) before the daemon starts: the server
answers reads, so the cache follower starts (its script loads), and holds
every write, as a server stuck on a full disk or a failover would. The search
follower must converge on the backlog and on changes written after it while
the cache's first batch waits; once Redis resumes, both equal the source.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import redis

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import batches, daemon_config, own_redis, start_daemon, verify_until_clean
from tests.integration.followers import follower_dicts, tear_down
from tests.support import end_offset, execute, source_dict, uid, wait_streaming

BACKLOG = 20_000  # rows in the log before the daemon starts: several of the cache's batches
CACHE_BATCH = 4_000  # the cache's batch: four tasks on two cores, so its first batch fills four slots
HUNG_S = 150  # the search follower must converge within this, twice, while the cache's first batch waits
PAUSE_MS = 1_000_000  # longer than the test: it ends with CLIENT UNPAUSE


def test_a_follower_behind_whose_sink_hangs_leaves_the_others_a_task_slot(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"behind_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id TEXT PRIMARY KEY, v INT NOT NULL, body TEXT)")
    search, cache, _warehouse = follower_dicts(tag, tmp_path)
    daemon = None
    with own_redis(tmp_path) as (redis_port, _restart):
        cache = {**cache, "url": f"redis://127.0.0.1:{redis_port}/0", "max_offsets_per_trigger": CACHE_BATCH}
        sources = [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])]
        _, config_path, config = daemon_config(tmp_path, sources, [search, cache])
        _, only_search, _ = daemon_config(tmp_path, sources, [search], name="search.yaml")
        log = tmp_path / "run.log"
        try:
            apply(config)
            wait_streaming(config)
            # The backlog, some rows wide, in the log before the daemon starts: the cache's first batch is full.
            execute(
                "postgres",
                f"INSERT INTO {table} SELECT 'k-' || g, g, CASE WHEN g % 50 = 0 THEN repeat(md5(g::text), 600)"
                f" ELSE 'row' END FROM generate_series(1, {BACKLOG}) g",
            )
            topic = config.sources[0].topic(config.sources[0].tables[0])
            deadline = time.monotonic() + 120
            while end_offset(topic) < BACKLOG:
                assert time.monotonic() < deadline, f"capture did not reach {topic}'s end in time"
                time.sleep(1)
            paused = redis.Redis(port=redis_port)
            paused.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
            daemon = start_daemon(config_path, log)
            last = verify_until_clean(only_search, within_s=HUNG_S)
            text = log.read_text(errors="replace")
            assert last.returncode == 0, ("search stalled behind the hung cache", last.stdout[-2000:], text[-3000:])
            assert batches(log, "cache") == 0, "the cache's writes were not held: " + text[-3000:]
            # Changes while the cache hangs: updates, deletes and key updates, all of which search must apply.
            execute(
                "postgres",
                f"UPDATE {table} SET v = -v WHERE v % 3 = 0",
                f"DELETE FROM {table} WHERE v % 7 = 0",
                f"UPDATE {table} SET id = id || '-moved' WHERE v % 11 = 0",
            )
            last = verify_until_clean(only_search, within_s=HUNG_S)
            text = log.read_text(errors="replace")
            assert last.returncode == 0, ("search stalled behind the hung cache", last.stdout[-2000:], text[-3000:])
            assert daemon.poll() is None, text[-3000:]

            assert batches(log, "cache") == 0, "the cache's writes were not held: " + text[-3000:]
            paused.execute_command("CLIENT", "UNPAUSE")
            last = verify_until_clean(config_path, within_s=420)
            assert last.returncode == 0, (last.stdout[-3000:], log.read_text()[-4000:])
            assert daemon.poll() is None, "the daemon exited: " + log.read_text()[-3000:]
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(120) == 0, log.read_text()[-3000:]
            daemon = None
        finally:  # own_redis resumes and stops its server after this
            tear_down(config, tag, daemon, {table: "postgres"})
