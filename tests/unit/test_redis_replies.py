"""How the Redis sink maps the apply script's answer for each row: no server, the answers are given.

The script answers a call with one string, a byte per row ('1' applied, '0' older, 'e' refused), then the
refused rows' errors in order (``sinks/redis_scripts.py``); ``per_row`` builds that answer.

Errors the server can return for one row inside a multi-row call (OOM, READONLY after a failover, an ACL
refusal) must stop the batch as the whole-call errors do, and an answer the sink does not know must
never be counted as applied.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import NoPermissionError, OutOfMemoryError, ReadOnlyError, ResponseError

from cdcsync.errors import FatalError, RetryableError
from cdcsync.events import Change
from cdcsync.sync.mapping import Row
from cdcsync.sync.sinks.redis import RedisSink


def rows(n: int) -> list[Row]:
    def row(i: int) -> Row:
        doc = {"id": i, "name": f"n{i}"}
        return Row(Change("test", "public.items", "u", {"id": i}, doc, None, 10, "topic", 0, i), "items", str(i), doc)

    return [row(i) for i in range(n)]


def per_row(*outcomes: Any) -> list[Any]:
    """The script's answer to a call whose rows had ``outcomes``: 1 applied, 0 older, or the row's error."""
    statuses = "".join("e" if isinstance(o, Exception) else str(o) for o in outcomes)
    return [statuses, *(o for o in outcomes if isinstance(o, Exception))]


def answering(monkeypatch: pytest.MonkeyPatch, answer: Any) -> RedisSink:
    """A sink whose one script call per write gets ``answer`` (the client never connects)."""
    sink = RedisSink("redis-test", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(sink, "_evalsha_all", lambda sha, calls: [answer] * len(calls))
    return sink


def test_per_row_answers_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    result = answering(monkeypatch, per_row(1, 0, refused, 1)).write(1, rows(4))
    assert (result.applied, result.older) == (2, 1)
    assert [(row.doc_id, reason) for row, reason in result.rejected] == [("2", str(refused))]


@pytest.mark.parametrize(
    "error",
    [OutOfMemoryError("command not allowed"), ReadOnlyError("You can't write"), ResponseError("BUSY Redis is busy")],
)
def test_a_transient_error_of_one_row_makes_the_batch_retryable(monkeypatch: pytest.MonkeyPatch, error: Any) -> None:
    with pytest.raises(RetryableError):
        answering(monkeypatch, per_row(1, error, 1)).write(1, rows(3))


def test_an_acl_refusal_of_one_row_is_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FatalError, match="NoPermissionError"):
        answering(monkeypatch, per_row(1, NoPermissionError("no permissions to run the 'hset' command"), 1)).write(
            1, rows(3)
        )


@pytest.mark.parametrize(
    "answer",
    [
        ["121"],  # a status byte the script never sends
        ["11"],  # fewer rows than the call had
        ["1111"],  # more
        ["1e1"],  # a refused row without its error
        ["111", ResponseError("WRONGTYPE x")],  # an error no row was refused for
        ["1e1", "WRONGTYPE x"],  # an error that is not an error reply
        [1, 1, 1],  # a reply per row (the script before this format)
        [],
        "OK",
        1,
    ],
)
def test_an_answer_the_sink_cannot_map_is_fatal_never_applied(monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    with pytest.raises(FatalError, match="apply script answered"):
        answering(monkeypatch, answer).write(1, rows(3))
