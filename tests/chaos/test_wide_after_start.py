"""Rows that turn wide after the daemon sampled them: a backlog of 60 KB rows behind small ones, no OutOfMemoryError.

A follower sizes its batches from a sample of the records at its position
when it starts (``sync.batching``). Here it starts on small rows (a limit of
100,000 records a batch), then the whole daemon is frozen (SIGSTOP: what a
broker outage or a long GC pause looks like from the log's side) while a
backlog of wide rows (hundreds of MB) is written. Thawed, the warehouse
follower's first batch would collect the whole backlog into the driver: the
byte bound on collected results (``spark.driver.maxResultSize``) must fail it
fast and the follower come back with smaller batches, never an
``OutOfMemoryError``, and every store must converge. Prints the recovery time.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import batches, daemon_config, running_daemon, stop_daemon, verify_until_clean
from tests.integration.followers import follower_dicts, tear_down
from tests.support import end_offset, execute, source_dict, uid, wait_streaming

ROWS = int(os.environ.get("CDCSYNC_CHAOS_WIDE_ROWS", "12000"))
WIDE = 60_000


@pytest.mark.long
def test_a_wide_backlog_behind_small_rows_converges_without_running_out_of_heap(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"late_wide_{uid()}"
    execute(
        "postgres",
        f"CREATE TABLE {table} (id INT PRIMARY KEY, body TEXT NOT NULL)",
        f"INSERT INTO {table} SELECT g, 'small' FROM generate_series(1, 200) g",
    )
    _, config_path, config = daemon_config(
        tmp_path, [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])], follower_dicts(tag, tmp_path)
    )
    log = tmp_path / "run.log"
    try:
        apply(config)
        wait_streaming(config)
        with running_daemon(config_path, log) as daemon:
            assert verify_until_clean(config_path, within_s=300).returncode == 0, log.read_text()[-3000:]
            assert batches(log, "warehouse") > 0
            os.killpg(daemon.pid, signal.SIGSTOP)  # frozen: the sample it took at start saw small rows only
            try:
                for start in range(1001, 1001 + ROWS, 500):  # random-looking text: Kafka cannot compress it away
                    execute(
                        "postgres",
                        f"INSERT INTO {table} SELECT g, string_agg(md5(g::text || ':' || i::text), '')"
                        f" FROM generate_series({start}, {min(start + 499, 1000 + ROWS)}) g,"
                        f" generate_series(1, {WIDE // 32}) i GROUP BY g",
                    )
                execute("postgres", f"UPDATE {table} SET body = 'small again' WHERE id <= 50",
                        f"DELETE FROM {table} WHERE id % 10 = 0")  # fmt: skip
                topic = config.sources[0].topic(config.sources[0].tables[0])
                deadline = time.monotonic() + 600
                while end_offset(topic) < 200 + ROWS:
                    assert time.monotonic() < deadline, f"capture did not reach {topic}'s end in time"
                    time.sleep(2)
            finally:
                os.killpg(daemon.pid, signal.SIGCONT)
            thawed = time.monotonic()
            last = verify_until_clean(config_path, within_s=30)
            while last.returncode != 0 and daemon.poll() is None and time.monotonic() - thawed < 1200:
                last = verify_until_clean(config_path, within_s=30)
            text = log.read_text(errors="replace")
            assert "OutOfMemoryError" not in text, text[-3000:]
            assert last.returncode == 0, (last.stdout[-2000:], text[-3000:])
            assert daemon.poll() is None, text[-3000:]
            print(f"\n{ROWS} rows of {WIDE // 1000} KB behind small ones: every store clean "
                  f"{time.monotonic() - thawed:.0f} s after the daemon was thawed")  # fmt: skip
            stop_daemon(daemon, log)
    finally:
        tear_down(config, tag, None, {table: "postgres"})
