"""Kafka Connect killed with SIGKILL mid-stream: capture resumes and nothing committed is lost.

Writers keep committing to Postgres and MariaDB while Connect is dead; after
it restarts, every committed change is in the topics. Duplicates are allowed
(Debezium re-sends from its last flushed offset: at-least-once); losses are not.
"""

from __future__ import annotations

import threading
import time

from cdcsync.connectors.apply import status
from tests.support import ENV, captured, execute, read_topic, stack, uid

ROWS = 600


def writer(kind: str, table: str, stop_after: int, errors: list[BaseException]) -> None:
    try:
        for i in range(1, stop_after + 1):
            execute(kind, f"INSERT INTO {table} VALUES ({i}, {i})")
            if i % 10 == 0:
                execute(kind, f"UPDATE {table} SET v = -v WHERE id = {i}")
            time.sleep(0.04)
    except BaseException as err:  # surfaced by the test thread
        errors.append(err)


def test_connect_sigkill_mid_stream_loses_no_committed_change() -> None:
    u = uid()
    pg_table, maria_table = f"chaos_pg_{u}", f"chaos_ma_{u}"
    ddl = "CREATE TABLE {} (id INT PRIMARY KEY, v INT NOT NULL)"
    with (
        captured("postgres", [ddl.format(pg_table)], [f"public.{pg_table}"]) as pg_cfg,
        captured("mariadb", [ddl.format(maria_table)], [f"{ENV['MARIADB_DATABASE']}.{maria_table}"]) as ma_cfg,
    ):
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=writer, args=(kind, table, ROWS, errors))
            for kind, table in (("postgres", pg_table), ("mariadb", maria_table))
        ]
        for t in threads:
            t.start()
        time.sleep(5)
        assert stack.main(["kill", "connect"]) == 0
        time.sleep(3)  # changes keep committing while Connect is dead
        assert stack.main(["up", "connect"]) == 0
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors

        for cfg in (pg_cfg, ma_cfg):
            source = cfg.sources[0]
            topic = source.topic(source.tables[0])

            def complete(records: list) -> bool:
                creates = {r.key["id"] for r in records if r.op == "c"}
                updates = {r.key["id"] for r in records if r.op == "u"}
                return len(creates) == ROWS and len(updates) == ROWS // 10

            records = read_topic(topic, complete, timeout=180)
            creates = {r.key["id"] for r in records if r.op == "c"}
            assert creates == set(range(1, ROWS + 1))
            assert {r.key["id"] for r in records if r.op == "u"} == set(range(10, ROWS + 1, 10))
            last = {}
            for r in records:
                last[r.key["id"]] = r.value["after"]["v"]
            assert last == {i: (-i if i % 10 == 0 else i) for i in range(1, ROWS + 1)}
            report = status(cfg)[0]
            assert report["state"] == "RUNNING" and report["tasks"][0]["state"] == "RUNNING", report
