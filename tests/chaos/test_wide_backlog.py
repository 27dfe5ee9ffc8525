"""A daemon started on a backlog of wide rows, with default settings, catches up without running out of heap.

Batches used to be bounded by record count only (20,000): with 60 KB rows that
is over a gigabyte per batch, collected on a 1 GiB driver heap, and the daemon
crash-looped on ``OutOfMemoryError``. The backlog here is built while no
daemon runs, then ``cdcsync run`` starts with nothing tuned.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import daemon_config, start_daemon, verify_until_clean
from tests.integration.followers import follower_dicts, tear_down
from tests.support import end_offset, execute, source_dict, uid, wait_streaming

ROWS = int(os.environ.get("CDCSYNC_CHAOS_WIDE_ROWS", "15000"))
WIDE = 60_000


@pytest.mark.long
def test_a_backlog_of_wide_rows_converges_with_default_settings(tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"wide_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id INT PRIMARY KEY, body TEXT NOT NULL)")
    _, config_path, config = daemon_config(
        tmp_path, [source_dict("postgres", f"{tag}_pg", [f"public.{table}"])], follower_dicts(tag, tmp_path)
    )
    log, daemon = tmp_path / "run.log", None
    try:
        apply(config)
        wait_streaming(config)
        # The backlog: ROWS rows of ~60 KB (random-looking text, so Kafka's compression cannot shrink it away).
        for start in range(1, ROWS + 1, 500):
            execute(
                "postgres",
                f"INSERT INTO {table} SELECT g, string_agg(md5(g::text || ':' || i::text), '')"
                f" FROM generate_series({start}, {min(start + 499, ROWS)}) g, generate_series(1, {WIDE // 32}) i"
                " GROUP BY g",
            )
        execute("postgres", f"DELETE FROM {table} WHERE id % 10 = 0")
        topic = config.sources[0].topic(config.sources[0].tables[0])
        deadline = time.monotonic() + 600
        while end_offset(topic) < ROWS + 2 * (ROWS // 10):  # inserts, deletes and their tombstones captured
            assert time.monotonic() < deadline, f"capture did not reach {topic}'s end in time"
            time.sleep(2)
        daemon = start_daemon(config_path, log)
        last = verify_until_clean(config_path, within_s=900)
        text = log.read_text(errors="replace")
        assert "OutOfMemoryError" not in text, text[-3000:]
        assert last.returncode == 0, (last.stdout[-2000:], text[-3000:])
        assert daemon.poll() is None, text[-3000:]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
        daemon = None
    finally:
        tear_down(config, tag, daemon, {table: "postgres"})
