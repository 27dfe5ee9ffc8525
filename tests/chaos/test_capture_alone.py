"""Capture comes back by itself after a broker kill: no daemon, so no watchdog, only Kafka Connect and Debezium.

A user may run the connectors without ``cdcsync run`` (the demo's own
``pg_inventory`` connector, or a daemon that is down). Connect stops every
task when its broker goes away and starts them again when it returns; a task
that has not let go of its Postgres slot or its JMX names by then used to
leave its successor failing for good (docs/capture.md, "A task's stop").
Writes go on at ``CDCSYNC_CHAOS_RATE`` with wide rows on both databases while
the broker is killed for ``DOWN_S``; each source's table topic must grow
again by itself, and the seconds it took join the kill matrix's table.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cdcsync.connectors.apply import apply
from tests.chaos.conftest import RESULTS, Recovery
from tests.chaos.recovery import CaptureClock
from tests.chaos.test_kill_matrix import Writer, table_ddl
from tests.support import ENV, config_for, drop_capture, execute, source_dict, stack, status, uid, wait_streaming

DOWN_S = 15
WITHIN_S = 120  # a bound on "by itself", far above what it takes (a few seconds): not a speed claim


@pytest.mark.long
@pytest.mark.parametrize("down_s", [DOWN_S, 150], ids=["down-15s", "down-150s"])
def test_capture_comes_back_by_itself_after_a_broker_kill(down_s: int, tmp_path: Path) -> None:
    tag = f"t{uid()}"
    tables = {"postgres": f"alone_{tag}_pg", "mariadb": f"alone_{tag}_ma"}
    for kind, name in tables.items():
        execute(kind, table_ddl(kind, name))
    config = config_for(
        source_dict("postgres", f"{tag}_pg", [f"public.{tables['postgres']}"]),
        source_dict("mariadb", f"{tag}_ma", [f"{ENV['MARIADB_DATABASE']}.{tables['mariadb']}"]),
    )
    writers = [Writer(kind, name) for kind, name in tables.items()]
    try:
        apply(config)
        wait_streaming(config)
        for w in writers:
            w.thread.start()
        time.sleep(20)
        assert stack.main(["kill", "kafka"]) == 0
        time.sleep(down_s)
        assert stack.main(["up", "kafka"]) == 0
        clock = CaptureClock(config, time.monotonic())
        clock.thread.join(WITHIN_S)
        clock.stop.set()
        RESULTS.append(Recovery(f"kafka {down_s}s, no daemon", clock.seconds, {}, sum(w.changes for w in writers)))
        assert clock.seconds is not None, (clock.back, status(config))
    finally:
        for w in writers:
            w.stop.set()
        stack.main(["up"])
        drop_capture(config)
        for kind, name in tables.items():
            execute(kind, f"DROP TABLE IF EXISTS {name}")
