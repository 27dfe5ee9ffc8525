"""The supervisor's rules on plain data: who restarts, when, and who stops alone.

The queries here are plain objects with the three members the supervisor
reads; the daemon's real queries are exercised in tests/chaos.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdcsync.config import FollowerConfig
from cdcsync.errors import FatalError, RetryableError
from cdcsync.sync import supervisor as sup
from cdcsync.sync.supervisor import Supervisor, backoff_s, permanent


class Query:
    def __init__(self) -> None:
        self.isActive = True
        self.lastProgress: dict[str, Any] | None = None
        self.error: str | None = None

    def exception(self) -> str | None:
        return self.error

    def fail(self, text: str) -> None:
        self.isActive, self.error = False, text

    def stop(self) -> None:
        self.isActive = False


def follower(name: str) -> FollowerConfig:
    return FollowerConfig(name=name, kind="delta")


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(sup.time, "monotonic", lambda: self.now)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert backoff_s(30) == sup.BACKOFF_CAP_S


def test_fatal_errors_are_permanent_in_python_and_in_a_batch_traceback() -> None:
    assert permanent(FatalError("bad mapping")) and not permanent(RetryableError("down"))
    assert permanent("Traceback ...\ncdcsync.errors.FatalError: follower x: counts do not add up")
    assert permanent("  cdcsync.sync.position.PositionError: follower x cannot resume")
    assert not permanent("cdcsync.errors.RetryableError: elasticsearch unreachable")
    assert not permanent("org.apache.spark.SparkException: Job aborted due to stage failure: TaskResultLost")


def test_one_failed_follower_restarts_alone_after_its_backoff(clock: Clock) -> None:
    queries: dict[str, list[Query]] = {"a": [], "b": []}

    def start(cfg: FollowerConfig) -> tuple[Query, list[str]]:
        queries[cfg.name].append(Query())
        return queries[cfg.name][-1], ["t"]

    s = Supervisor([follower("a"), follower("b")], start)
    s.start_all()
    queries["a"][0].fail("org.apache.spark.SparkException: TaskResultLost")
    s.tick()
    a, b = s.children
    assert (a.state, b.state) == ("restarting", "running") and len(queries["b"]) == 1
    assert s.health() == (False, ["follower a restarting (restart 1): org.apache.spark.SparkException: TaskResultLost"])
    clock.now += 1.9
    s.tick()
    assert a.state == "restarting"  # 2 s back-off not over
    clock.now += 0.2
    s.tick()
    assert (a.state, a.restarts, len(queries["a"])) == ("running", 1, 2)
    assert s.health() == (True, [])


def test_the_reason_is_our_error_line_not_the_query_plan(clock: Clock) -> None:
    query = Query()
    s = Supervisor([follower("a")], lambda cfg: (query, []))
    s.start_all()
    query.fail(
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred\nTraceback:\n  File x\n"
        "cdcsync.errors.RetryableError: follower a: sink still failing after 2 attempts: refused\n"
        "=== Streaming Query ===\n   +- ~StreamingDataSourceV2ScanRelation[key#26] Kafka"
    )
    s.tick()
    assert (
        s.children[0].reason
        == "cdcsync.errors.RetryableError: follower a: sink still failing after 2 attempts: refused"
    )


def test_failures_in_a_row_grow_the_backoff_and_a_committed_batch_resets_it(clock: Clock) -> None:
    current: list[Query] = []

    def start(cfg: FollowerConfig) -> tuple[Query, list[str]]:
        current.append(Query())
        return current[-1], []

    s = Supervisor([follower("a")], start)
    s.start_all()
    child = s.children[0]
    for expected in (2, 4, 8):
        current[-1].fail("cdcsync.errors.RetryableError: sink still failing")
        s.tick()
        assert child.next_start - clock.now == expected
        clock.now += expected
        s.tick()
    current[-1].lastProgress = {"batchId": 7}  # the restarted query committed a batch
    s.tick()
    assert child.failures_in_row == 0


def test_a_fatal_start_stops_that_follower_alone_with_its_reason(clock: Clock) -> None:
    def start(cfg: FollowerConfig) -> tuple[Query, list[str]]:
        if cfg.name == "a":
            raise FatalError("follower a cannot resume: run `cdcsync reindex a`")
        return Query(), []

    s = Supervisor([follower("a"), follower("b")], start)
    s.start_all()
    assert [c.state for c in s.children] == ["stopped", "running"]
    assert s.health()[1] == ["follower a stopped: follower a cannot resume: run `cdcsync reindex a`"]
    clock.now += 3600
    s.tick()
    assert s.children[0].state == "stopped" and not s.all_stopped()


def test_a_fatal_batch_gets_one_restart_then_stops(clock: Clock) -> None:
    current: list[Query] = []

    def start(cfg: FollowerConfig) -> tuple[Query, list[str]]:
        current.append(Query())
        return current[-1], []

    s = Supervisor([follower("a")], start)
    s.start_all()
    fatal = "Traceback\ncdcsync.errors.FatalError: follower a: a poison record could not be dead-lettered\n  more"
    current[-1].fail(fatal)
    s.tick()
    assert s.children[0].state == "restarting"
    clock.now += 2
    s.tick()
    current[-1].fail(fatal)
    s.tick()
    child = s.children[0]
    assert child.state == "stopped" and child.reason.startswith("cdcsync.errors.FatalError: follower a: a poison")
    assert s.all_stopped()


def test_a_position_past_the_horizon_stops_only_that_follower(clock: Clock) -> None:
    def check(cfg: FollowerConfig, topics: list[str]) -> None:
        if cfg.name == "a":
            raise FatalError("follower a cannot resume from its position")

    s = Supervisor([follower("a"), follower("b")], lambda cfg: (Query(), ["t"]), check=check)
    s.start_all()
    clock.now += sup.POSITION_CHECK_S
    s.tick()
    assert [c.state for c in s.children] == ["stopped", "running"]
    assert not s.children[0].query.isActive


def test_a_check_that_asks_for_a_relaunch_restarts_that_follower_at_once_without_counting_a_failure(
    clock: Clock,
) -> None:
    appeared = {"a": True}

    def check(cfg: FollowerConfig, topics: list[str]) -> None:
        if appeared.get(cfg.name):
            appeared[cfg.name] = False
            raise sup.Relaunch("now following ['t2'] as well")

    starts: list[str] = []

    def start(cfg: FollowerConfig) -> tuple[Query, list[str]]:
        starts.append(cfg.name)
        return Query(), ["t1", "t2"] if len(starts) > 2 else ["t1"]

    s = Supervisor([follower("a"), follower("b")], start, check=check)
    s.start_all()
    first = s.children[0].query
    clock.now += sup.POSITION_CHECK_S
    s.tick()
    assert starts == ["a", "b", "a"] and not first.isActive
    a = s.children[0]
    assert a.state == "running" and a.topics == ["t1", "t2"] and a.failures_in_row == 0 and a.restarts == 0
    assert s.children[1].query.isActive


def test_a_batch_that_gave_up_on_its_sink_counts_the_retries_its_error_reports() -> None:
    from cdcsync import metrics
    from cdcsync.sync.executors import count_failed_retries

    counter = metrics.SINK_RETRIES.labels("retry-count-test")
    before = counter._value.get()
    error = (
        "Job aborted due to stage failure: Task 1 in stage 7.0 failed 4 times, most recent failure: ... "
        "cdcsync.errors.RetryableError: follower retry-count-test: sink still failing after 8 attempts: timed out"
    )
    count_failed_retries("retry-count-test", error)
    count_failed_retries("retry-count-test", "an error that is not the sink's")
    assert counter._value.get() - before == 7


class Unstoppable(Query):
    """A query whose batch thread the JVM cannot free: stop() never returns in time."""

    def stop(self) -> None:
        raise RuntimeError("java.util.concurrent.TimeoutException: Stream Execution thread failed to stop")


@pytest.fixture
def watched(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The supervisor's clock is the deadlines' too; the warehouse's batch is no longer watched afterwards."""
    from cdcsync.sync import deadline

    monkeypatch.setattr(deadline.time, "monotonic", lambda: clock.now)
    yield clock
    deadline.end("warehouse")


def test_a_batch_past_its_deadline_is_named_cancelled_and_its_follower_restarted_alone(watched: Clock) -> None:
    from cdcsync.sync import deadline

    clock = watched
    queries = {"warehouse": Query(), "search": Query()}
    s = Supervisor([follower("warehouse"), follower("search")], lambda cfg: (queries[cfg.name], []))
    s.start_all()
    deadline.begin("warehouse", 7, 100.0)
    clock.now += 61  # a minute without progress: named, not yet cancelled
    s.tick()
    ok, problems = s.health()
    assert not ok and problems == [
        "follower warehouse behind and not applying: batch 7 made no progress for 61 s (cancelled at 100 s)"
    ]
    clock.now += 40  # past the deadline
    s.tick()
    warehouse, search = s.children
    assert not queries["warehouse"].isActive and warehouse.state == "restarting", warehouse
    assert "batch 7 made no progress for 101 s (deadline 100 s)" in warehouse.reason
    assert search.state == "running" and queries["search"].isActive  # the other follower never noticed
    assert deadline.stalled("warehouse") is None  # the cancelled batch is no longer watched


def test_a_cancelled_batch_whose_query_cannot_stop_asks_for_a_new_process(watched: Clock) -> None:
    from cdcsync.sync import deadline

    s = Supervisor([follower("warehouse")], lambda cfg: (Unstoppable(), []))
    s.start_all()
    deadline.begin("warehouse", 3, 10.0)
    watched.now += 11
    with pytest.raises(sup.Stuck, match="batch 3 made no progress"):
        s.tick()


def test_a_batch_too_large_for_the_driver_makes_the_next_start_take_fewer_records(clock: Clock) -> None:
    from cdcsync.sync import batching

    query = Query()
    s = Supervisor([follower("warehouse")], lambda cfg: (query, []))
    s.start_all()
    query.fail(
        "org.apache.spark.SparkException: Job aborted due to stage failure: Total size of serialized results of 3 "
        "tasks (600.0 MiB) is bigger than spark.driver.maxResultSize (512.0 MiB)"
    )
    s.tick()
    assert "too large for the driver" in s.children[0].reason
    assert batching.shrunk("warehouse", 100_000) == 25_000
    query.fail("Total size of serialized results of 1 tasks is bigger than spark.driver.maxResultSize")
    s.children[0].state = "running"
    s.tick()
    assert batching.shrunk("warehouse", 100_000) == 100_000 // 16 and batching.shrunk("search", 1000) == 1000
    batching.unshrink("warehouse")
    assert batching.shrunk("warehouse", 100_000) == 100_000
