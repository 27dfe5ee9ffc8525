"""Every batch has a deadline: a batch that stops making progress is found, named and cancelled.

A batch can wait forever without failing: the Spark driver out of heap in a
``task-result-getter`` thread (the collect that waited for those results
never returns), a sink that stops answering without closing its connection
(a stopped process, a network that drops packets). Its query stays
"active", so nothing else would notice.

Each follower's batch function tells this module when a batch begins and
ends, and the follower on the driver marks progress as it goes (records
read, chunks written). ``overdue`` is a batch that made no progress for
longer than its deadline; ``slow`` one that made none for a minute (or half
its deadline, if shorter), which ``/healthz`` and the lag page already name
(behind and not applying). The
supervisor (``sync.supervisor``) cancels an overdue batch by stopping its
query (Spark cancels the batch's jobs and kills their tasks) and restarts
the follower like after any failure; a query that does not stop within
``CANCEL_GRACE_S`` holds a thread the JVM cannot free, and the daemon starts
its process again (``sync.daemon``).

The deadline: the follower's ``batch_deadline_s``, else derived from what a
batch may hold: ``BASE_S`` plus its byte bound read at ``MIN_BYTES_PER_S``
(64 MiB: 184 s). It runs from the last progress, not from the start: a long
batch that keeps writing is never cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdcsync import metrics
from cdcsync.spark import STOP_TIMEOUT_S

BASE_S = 120.0  # a batch's fixed costs at their worst: a cold JVM's first MERGE, a sink's retries backing off
MIN_BYTES_PER_S = 1024 * 1024  # the slowest a batch may move its bytes and still be making progress
SLOW_S = 60.0  # no progress for this long: named in /healthz as behind and not applying, before its deadline
# A cancelled batch's query must stop within this (the session's spark.sql.streaming.stopTimeout), or its process
# starts again.
CANCEL_GRACE_S = STOP_TIMEOUT_S


def deadline_s(configured: float | None, batch_bytes: int) -> float:
    """A batch's deadline: ``configured``, else ``BASE_S`` plus ``batch_bytes`` at ``MIN_BYTES_PER_S``."""
    return configured if configured is not None else BASE_S + batch_bytes / MIN_BYTES_PER_S


@dataclass
class Running:
    batch_id: int
    deadline_s: float
    started: float
    progressed: float


_lock = threading.Lock()
_running: dict[str, Running] = {}  # follower -> its batch in progress (batch functions run on the driver)


def watched(follower: str, deadline: float, batch: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    """``batch`` (a ``foreachBatch`` function) with its begin and end told to this module."""

    def run(df: Any, batch_id: int) -> None:
        begin(follower, batch_id, deadline)
        try:
            batch(df, batch_id)
        finally:
            end(follower)

    return run


def begin(follower: str, batch_id: int, deadline: float) -> None:
    now = time.monotonic()
    with _lock:
        _running[follower] = Running(batch_id, deadline, now, now)


def progress(follower: str) -> None:
    """The batch moved: records read, a chunk written. Cheap: called per chunk and per Arrow batch."""
    running = _running.get(follower)
    if running is not None:
        running.progressed = time.monotonic()


def current(follower: str) -> int | None:
    """The id of the follower's batch in progress: None once it ended or was cancelled."""
    running = _running.get(follower)
    return None if running is None else running.batch_id


def end(follower: str) -> None:
    with _lock:
        _running.pop(follower, None)
    metrics.BATCH_STALLED_S.labels(follower).set(0)


def stalled(follower: str, now: float | None = None) -> tuple[Running, float] | None:
    """The follower's batch in progress and the seconds since it last moved, if one is running."""
    running = _running.get(follower)
    if running is None:
        return None
    idle = (time.monotonic() if now is None else now) - running.progressed
    metrics.BATCH_STALLED_S.labels(follower).set(idle)
    return running, idle


def overdue(follower: str, now: float | None = None) -> str | None:
    """Why the follower's batch is past its deadline, or None."""
    found = stalled(follower, now)
    if found is None or found[1] <= found[0].deadline_s:
        return None
    running, idle = found
    return (
        f"batch {running.batch_id} made no progress for {idle:.0f} s (deadline {running.deadline_s:.0f} s): "
        "cancelled, the follower restarts"
    )


def slow(follower: str, now: float | None = None) -> str | None:
    """A line for /healthz when the follower's batch has made no progress for ``SLOW_S``, or None."""
    found = stalled(follower, now)
    if found is None or found[1] <= min(SLOW_S, found[0].deadline_s / 2):
        return None
    running, idle = found
    return (
        f"follower {follower} behind and not applying: batch {running.batch_id} made no progress for {idle:.0f} s "
        f"(cancelled at {running.deadline_s:.0f} s)"
    )
