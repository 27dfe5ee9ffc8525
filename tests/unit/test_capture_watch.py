"""The capture watchdog's rules on plain data: when it restarts, when it waits, what it reports.

Connect's answers and the heartbeat offsets are plain values here; the
watchdog against a real Connect, Kafka and Postgres is in tests/chaos.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdcsync.config import Config
from cdcsync.connectors import watch as w
from cdcsync.connectors.lag import STALL_MIN_S
from cdcsync.connectors.watch import CaptureWatch, heal_backoff_s

SOURCE = {
    "name": "pg",
    "kind": "mariadb",
    "port": 1,
    "database": "d",
    "user": "u",
    "password": "p",
    "tables": ["d.t"],
    "heartbeat_interval_ms": 1000,
}


class Connect:
    def __init__(self) -> None:
        self.state, self.task = "RUNNING", "RUNNING"
        self.trace = "PSQLException: not yet accepting"
        self.calls: list[str] = []

    def status(self, name: str) -> dict[str, Any]:
        task = {
            "id": 0,
            "state": self.task,
            **({"trace": self.trace} if self.task == "FAILED" else {}),
        }
        return {"connector": {"state": self.state}, "tasks": [task]}

    def offsets(self, name: str) -> list[dict[str, Any]]:
        return []  # a connector that has committed nothing: no restore to detect

    def restart(self, name: str) -> None:
        self.calls.append("restart")

    def restart_all(self, name: str) -> None:
        self.calls.append("restart_all")


class Watch(CaptureWatch):
    """The watchdog with Kafka's heartbeat end, the database's answer and the slot's holder as plain values."""

    def __init__(self, connect: Connect, kind: str = "mariadb") -> None:
        self.now, self.heartbeat = 0.0, 0
        self.kafka_up, self.database_up = True, True
        self.ended: list[str] = []  # sources whose slot holder was ended
        config = Config.model_validate({"sources": [{**SOURCE, "kind": kind}]})
        super().__init__(config, client=connect, clock=lambda: self.now)  # type: ignore[arg-type]

    def _heartbeat_end(self, source: Any) -> int:
        if not self.kafka_up:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return self.heartbeat

    def _probe(self, source: Any) -> None:
        if not self.database_up:
            raise ConnectionRefusedError(111, "Connection refused")

    def _end_slot_backend(self, source: Any) -> int | None:
        self.ended.append(source.name)
        return 4242

    def run_for(self, seconds: float, beating: bool = False) -> None:
        """A tick every ``WATCH_S`` for ``seconds``; the heartbeat grows at each when ``beating``."""
        for _ in range(int(seconds / w.WATCH_S)):
            self.now += w.WATCH_S
            self.heartbeat += beating
            self.tick()


def test_a_failed_task_is_restarted_with_a_growing_backoff_until_it_runs() -> None:
    connect = Connect()
    watch = Watch(connect)
    connect.task = "FAILED"
    watch.tick()
    assert connect.calls == ["restart"]
    assert watch.health() == (False, ["capture pg: FAILED: PSQLException: not yet accepting"])
    watch.now += w.WATCH_S
    watch.tick()  # the first back-off (10 s) is over
    watch.now += 5
    watch.tick()  # the second (20 s) is not
    assert connect.calls == ["restart", "restart"]
    connect.task = "RUNNING"
    watch.heartbeat += 3
    watch.now += 30
    watch.tick()
    assert watch.health() == (True, []) and watch.sources[0].heals_in_row == 0


def test_idle_is_healthy_while_heartbeats_come_and_silence_is_healed_then_reported() -> None:
    connect = Connect()
    watch = Watch(connect)
    for _ in range(10):  # an idle source: heartbeats only
        watch.heartbeat += 1
        watch.now += 30
        watch.tick()
    assert watch.health() == (True, []) and connect.calls == []
    watch.now += STALL_MIN_S + 1  # RUNNING, and silent for over a minute
    watch.tick()
    assert connect.calls == ["restart_all"]
    ok, [problem] = watch.health()
    assert not ok and problem.startswith("capture pg: RUNNING but no heartbeat for 61 s")


def test_backoff_is_capped() -> None:
    assert [heal_backoff_s(n) for n in (1, 2, 3)] == [10, 20, 40]
    assert heal_backoff_s(40) == w.RESTART_CAP_S


def test_a_missing_connector_is_reported_not_created() -> None:
    connect = Connect()
    connect.status = lambda name: None  # type: ignore[method-assign]
    watch = Watch(connect)
    watch.tick()
    assert watch.health()[1] == ["capture pg: connector pg is not registered; run `cdcsync connectors apply`"]
    assert connect.calls == []


def test_a_log_behind_what_capture_read_is_a_restore() -> None:
    from cdcsync.connectors.restore import went_back

    assert went_back("postgres", {"lsn": 5000, "txId": 7}, 4000) == (
        "its WAL position 4000 is behind the LSN 5000 capture already read"
    )
    assert went_back("postgres", {"lsn": 5000}, 5000) is None
    assert went_back("mariadb", {"gtids": "0-1-345"}, "0-1-12") is not None
    assert went_back("mariadb", {"gtids": "0-1-345"}, "") is not None  # RESET MASTER: no GTID at all
    assert went_back("mariadb", {"gtids": "0-1-345"}, "0-1-345,1-1-3") is None
    assert went_back("mariadb", {"file": "b.000001", "pos": 4}, "0-1-1") is None  # an offset with no GTID yet


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_failed_task_waits_for_its_database_and_is_restarted_the_moment_it_answers(kind: str) -> None:
    """The kill -9 of Postgres: the task FAILED while the database restarts.

    A restart while the database cannot be reached fails, and used to double the
    back-off each time: once the database was back, the next restart could be
    minutes away. Now the watch waits, says so, and restarts at the first tick
    the database answers, whatever restarts came before.
    """
    connect = Connect()
    connect.offsets = lambda name: [{"offset": {"lsn": 10, "gtids": "0-1-5"}}]  # type: ignore[method-assign]
    connect.task = "FAILED"
    watch = Watch(connect, kind=kind)
    watch.run_for(60)  # restarted six times, the back-off grown to 40 s
    restarts = len(connect.calls)
    assert restarts >= 2 and watch.sources[0].heals_in_row == restarts
    watch.database_up = False
    watch.run_for(300)
    assert len(connect.calls) == restarts  # no restart while it is down
    ok, [problem] = watch.health()
    assert not ok and problem.endswith("its database cannot be reached: restarted when it answers")
    watch.database_up = True
    watch.run_for(w.WATCH_S)
    assert len(connect.calls) == restarts + 1  # at once, not after the back-off it had reached
    assert watch.sources[0].heals_in_row == 1


def test_kafka_down_is_no_stall_and_capture_silent_after_its_return_is_healed_within_the_grace() -> None:
    """A broker down for ten minutes: nothing is restarted meanwhile (a restart then leaves a task Connect
    cannot stop), the outage is not counted as silence, and capture still silent ``RETURN_GRACE_S`` after
    Kafka answers again is healed then, not a minute later and not after a grown back-off."""
    connect = Connect()
    watch = Watch(connect)
    watch.run_for(30, beating=True)
    watch.sources[0].heals_in_row, watch.sources[0].next_heal = 5, 10_000.0  # heals before: a long back-off
    watch.kafka_up = False
    watch.run_for(600)
    assert connect.calls == []
    assert watch.health() == (False, [f"capture: {watch.kafka_problem()}"])
    watch.heartbeat += 1  # written just before the broker went: no sign of life after its return
    watch.kafka_up = True
    watch.run_for(w.RETURN_GRACE_S)  # its first tick sees Kafka back; Connect's own recovery gets the grace
    assert connect.calls == [] and watch.health() == (True, [])
    watch.run_for(w.WATCH_S)
    assert connect.calls == ["restart_all"]
    assert watch.sources[0].heals_in_row == 1


def test_capture_that_produces_after_kafka_returns_is_left_alone() -> None:
    connect = Connect()
    watch = Watch(connect)
    watch.run_for(30, beating=True)
    watch.kafka_up = False
    watch.run_for(120)
    watch.kafka_up = True
    watch.run_for(10 * w.RETURN_GRACE_S, beating=True)
    assert connect.calls == [] and watch.health() == (True, [])


def test_a_source_with_no_heartbeat_topic_yet_is_reported_alone_and_its_failed_task_still_restarted() -> None:
    """A connector that never produced has no heartbeat topic: that is no Kafka outage for the other sources."""
    connect = Connect()
    config = Config.model_validate({"sources": [SOURCE, {**SOURCE, "name": "fresh", "server_id": 7}]})
    watch = CaptureWatch(config, client=connect, clock=lambda: 0.0)  # type: ignore[arg-type]

    def end(source: Any) -> int:
        if source.name == "fresh":
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        return 1

    watch._heartbeat_end = end  # type: ignore[method-assign]
    watch.tick()
    assert watch.kafka_down_since is None
    assert watch.health()[1] == ["capture fresh: cannot be watched: no heartbeat topic __debezium-heartbeat.fresh yet"]
    connect.task = "FAILED"
    watch._probe = lambda source: None  # type: ignore[method-assign]
    watch.tick()
    assert connect.calls == ["restart", "restart"]  # both sources' FAILED tasks, the fresh one's too


def test_a_task_failed_on_a_slot_another_connection_holds_has_the_holder_ended_then_restarted() -> None:
    connect = Connect()
    connect.task = "FAILED"
    connect.trace = (
        "io.debezium.DebeziumException: Failed to start replication stream at LSN{0/24C842B8}\n"
        'Caused by: org.postgresql.util.PSQLException: ERROR: replication slot "cdcsync_pg_inventory" is active '
        "for PID 5917"
    )
    watch = Watch(connect, kind="postgres")
    watch.tick()
    assert watch.ended == ["pg"] and connect.calls == ["restart_all"]


def test_a_ddl_debezium_cannot_parse_is_not_restarted_and_the_table_column_and_fix_are_named() -> None:
    """A trace as Kafka Connect reports it for a MariaDB table with an INET6 column (Debezium 3.2)."""
    from pathlib import Path

    from cdcsync.connectors.watch import unrecoverable

    trace = (Path(__file__).parent / "fixtures" / "mariadb-ddl-parse-trace.txt").read_text()
    fix = unrecoverable(trace)
    assert fix is not None
    assert "table edge_e86f1fd5, column i6 of type inet6" in fix
    assert "DELETE /connectors/<source>" in fix and "cdcsync connectors apply" in fix
    # Errors a restart can heal keep being restarted.
    assert unrecoverable("org.postgresql.util.PSQLException: FATAL: the database system is starting up") is None
    assert unrecoverable("") is None

    from cdcsync import metrics

    connect = Connect()
    watch = Watch(connect)
    connect.task, connect.trace = "FAILED", trace
    for _ in range(3):
        watch.tick()
        watch.now += w.RESTART_CAP_S
    assert connect.calls == []  # no restart loop
    healthy, problems = watch.health()
    assert not healthy and problems == [f"capture pg: FAILED, not restarted: {fix}"]
    assert metrics.CAPTURE_UNRECOVERABLE.labels("pg")._value.get() == 1
    connect.task = "RUNNING"  # fixed by hand (the connector made anew)
    watch.tick()
    assert metrics.CAPTURE_UNRECOVERABLE.labels("pg")._value.get() == 0
