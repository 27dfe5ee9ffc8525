"""The retry policies (cdcsync.retry, on tenacity): how many tries, the waits between them, what is raised at the end.

Sleeps are recorded, not slept: tenacity sleeps through ``time.sleep``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from cdcsync.connectors.client import ConnectClient, ConnectUnreachable
from cdcsync.errors import FatalError, RetryableError
from cdcsync.snapshot.replay import publish
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.sink import WriteResult


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    return waits


class Failing:
    """Raises the given errors in turn, then succeeds."""

    name, chunk_rows, writers = "failing", None, 1

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    def write(self, batch_id: int, rows: list[Any]) -> WriteResult:
        return self._next(WriteResult(applied=len(rows)))

    def publish(self) -> None:
        self._next(None)

    def _next(self, result: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return result


def follower(sink: Failing, attempts: int) -> Follower:
    mapping = TableMapping("public.t", "t", ("id",), types={"id": "int"})
    dead = DeadLetters({"bootstrap.servers": "127.0.0.1:1"}, "dlq", "retry-test")
    return Follower("retry-test", sink, {"src.public.t": mapping}, dead, max_attempts=attempts)  # type: ignore[arg-type]


def test_a_sink_write_waits_twice_as_long_each_time_at_least_what_the_error_asks_at_most_30_s(
    slept: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    asks = [1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0]
    sink, counts = Failing(*(RetryableError("busy", a) for a in asks)), BatchCounts()
    result = follower(sink, attempts=9)._write(7, [], counts)
    assert result.applied == 0 and sink.calls == 9
    # 1, 2, 4, then the error's 5 s is less than the doubled 8; 16, then 32 capped at 30
    assert slept == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert counts.retries == 8
    assert "follower=retry-test batch=7 attempt=1 retry_in_s=1.0 error=busy" in caplog.text


def test_a_long_retry_after_sets_the_wait_and_doubling_goes_on_from_it(slept: list[float]) -> None:
    sink = Failing(RetryableError("429", 5.0), RetryableError("429", 1.0), RetryableError("429", 1.0))
    follower(sink, attempts=4)._write(1, [], BatchCounts())
    assert slept == [5.0, 10.0, 20.0]


def test_a_sink_still_failing_after_its_attempts_fails_the_batch_with_a_retryable_error(slept: list[float]) -> None:
    sink, counts = Failing(*(RetryableError("refused", 3.0) for _ in range(3))), BatchCounts()
    with pytest.raises(RetryableError) as raised:
        follower(sink, attempts=3)._write(1, [], counts)
    assert str(raised.value) == "follower retry-test: sink still failing after 3 attempts: refused"
    assert raised.value.retry_after == 3.0 and isinstance(raised.value.__cause__, RetryableError)
    assert slept == [3.0, 6.0] and counts.retries == 2  # no wait after the last attempt


def test_one_attempt_fails_at_once_and_a_fatal_error_is_never_retried(slept: list[float]) -> None:
    with pytest.raises(RetryableError, match="after 1 attempts: down"):
        follower(Failing(RetryableError("down")), attempts=1)._write(1, [], BatchCounts())
    fatal = FatalError("bad mapping")
    with pytest.raises(FatalError) as raised:
        follower(Failing(fatal), attempts=8)._write(1, [], BatchCounts())
    assert raised.value is fatal and slept == []


def test_a_connect_call_waits_retry_after_times_the_attempts_then_raises_its_last_error(slept: list[float]) -> None:
    client = ConnectClient("http://127.0.0.1:1/", retries=4)
    errors = [
        RetryableError("409", 2.0),
        RetryableError("503", 1.0),
        ConnectUnreachable("no 1"),
        ConnectUnreachable("no 2"),
    ]
    tried: list[str] = []

    def once(method: str, path: str, body: Any, ok_404: bool) -> Any:
        tried.append(f"{method} {path}")
        raise errors[len(tried) - 1]

    client._once = once  # type: ignore[method-assign]
    with pytest.raises(ConnectUnreachable) as raised:
        client.connectors()
    assert raised.value is errors[-1] and tried == ["GET /connectors"] * 4
    assert slept == [2.0, 2.0, 3.0]  # min(retry_after x attempt, 5); none after the last
    slept.clear()
    client._once = lambda *args: (_ for _ in ()).throw(RetryableError("slow", 4.0))  # type: ignore[method-assign]
    with pytest.raises(RetryableError, match="slow"):
        client.version()
    assert slept == [4.0, 5.0, 5.0]


def test_a_connect_call_that_succeeds_or_fails_fatally_is_not_retried(slept: list[float]) -> None:
    client = ConnectClient("http://127.0.0.1:1", retries=5)
    answers: list[Any] = [RetryableError("409"), ["a", "b"]]

    def once(*args: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    client._once = once  # type: ignore[method-assign]
    assert client.connectors() == ["a", "b"] and slept == [1.0]
    client._once = lambda *args: (_ for _ in ()).throw(FatalError("400 bad"))  # type: ignore[method-assign]
    with pytest.raises(FatalError, match="400 bad"):
        client.connectors()
    assert slept == [1.0]


def test_publish_waits_2_4_8_then_raises_the_last_error_as_it_is(slept: list[float]) -> None:
    errors = [RetryableError(f"conflict {i}", 1.0) for i in range(6)]
    sink = Failing(*errors)
    with pytest.raises(RetryableError) as raised:
        publish(sink)  # type: ignore[arg-type]
    assert raised.value is errors[-1] and sink.calls == 6
    assert slept == [2.0, 4.0, 8.0, 16.0, 30.0]
    slept.clear()
    publish(Failing(RetryableError("conflict", 3.0)))  # type: ignore[arg-type]
    assert slept == [3.0]
