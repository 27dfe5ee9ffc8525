"""The daemon's supervisor: one child per follower, each failing and restarting alone.

In the manner of an OTP ``one_for_one`` supervisor: a follower (its streaming
query) that fails is restarted by itself, after a back-off that doubles per
failure in a row (2 s, 4 s, ... capped at ``BACKOFF_CAP_S``) and resets once
the restarted query commits a batch. The other followers never notice. A sink
that is down is waited out this way: the follower's retries give up, its
query fails, and the supervisor keeps restarting it, further and further
apart, until the sink answers again.

A fault no restart can fix stops that follower alone, with the reason: a
``FatalError`` when it starts (bad config, a mapping the store cannot take, a
position past the compaction horizon), or one raised by a batch again right
after a restart (a poison record that cannot be dead-lettered). A first
``FatalError`` in a batch earns one restart: reopening the sink repairs some
(an index deleted by hand). Each child's state is visible as
``cdcsync_follower_state`` and ``cdcsync_follower_restarts_total`` and in
``/healthz``.

========== ==============================================================
state      meaning
========== ==============================================================
starting   its query is being built (sink opened, position checked)
running    its query is active; a batch that makes no progress past its
           deadline (``sync.deadline``) is cancelled, and the follower
           restarts as after any failure
restarting it failed; the next start is due at ``next_start``
stopped    a fault a restart cannot fix; ``reason`` says which and what to do
========== ==============================================================
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cdcsync import metrics
from cdcsync.config import FollowerConfig
from cdcsync.errors import FatalError
from cdcsync.sync import batching, deadline

log = logging.getLogger("cdcsync.supervisor")

BACKOFF_FIRST_S = 2.0
BACKOFF_CAP_S = 60.0
POSITION_CHECK_S = 60.0  # how often a running follower's position is checked against the compaction horizon
STATES = ("starting", "running", "restarting", "stopped")
# The root of a Python exception raised inside a batch, as the query's exception text carries it.
_OUR_ERROR = re.compile(r"cdcsync\.[\w.]*(Error|Record): ")
_FATAL_IN_BATCH = re.compile(r"cdcsync\.[\w.]*\.(FatalError|PositionError|ConfigError): ")


class Stuck(Exception):  # noqa: N818  (an instruction, not an error)
    """Raised by ``tick``: a cancelled batch holds a thread the JVM cannot free; its process must start again."""


class Relaunch(Exception):  # noqa: N818  (an instruction, not an error)
    """Raised by a check: the follower is fine but must start again (its tables' topics appeared)."""


@dataclass
class Child:
    follower: FollowerConfig
    state: str = "starting"
    restarts: int = 0
    failures_in_row: int = 0
    reason: str = ""
    next_start: float = 0.0
    query: Any = None
    topics: list[str] = field(default_factory=list)
    started_batch: int | None = None  # the query's last batch id when it (re)started

    @property
    def name(self) -> str:
        return self.follower.name


# (config of one follower) -> (its active streaming query, the topics it follows)
Starter = Callable[[FollowerConfig], tuple[Any, list[str]]]
Checker = Callable[[FollowerConfig, list[str]], None]


def permanent(error: BaseException | str) -> bool:
    """Whether a failure is one a restart cannot fix (a ``FatalError``, in Python or in a batch's traceback)."""
    if isinstance(error, BaseException):
        return isinstance(error, FatalError)
    return bool(_FATAL_IN_BATCH.search(error))


def backoff_s(failures_in_row: int) -> float:
    return float(min(BACKOFF_FIRST_S * 2 ** max(failures_in_row - 1, 0), BACKOFF_CAP_S))


class Supervisor:
    def __init__(self, followers: list[FollowerConfig], start: Starter, check: Checker | None = None) -> None:
        self.children = [Child(follower) for follower in followers]
        self._start, self._check = start, check
        self._next_check = time.monotonic() + POSITION_CHECK_S

    def start_all(self) -> None:
        for child in self.children:
            self._launch(child)

    def tick(self) -> None:
        """Watch every child once: note failures, start the ones whose back-off is over, check positions."""
        now = time.monotonic()
        for child in self.children:
            if child.state == "running":
                self._watch(child)
            elif child.state == "restarting" and now >= child.next_start:
                child.restarts += 1
                metrics.RESTARTS.labels(child.name).inc()
                self._launch(child)
        if self._check is not None and now >= self._next_check:
            self._next_check = now + POSITION_CHECK_S
            for child in self.children:
                if child.state == "running":
                    self._check_position(child)

    def stop_all(self, stop_query: Callable[[Any], None]) -> None:
        """Stop every active query, all at once (each may wait for the end of its batch)."""
        active = [c.query for c in self.children if c.query is not None and c.query.isActive]
        stoppers = [threading.Thread(target=stop_query, args=(q,)) for q in active]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()

    def all_stopped(self) -> bool:
        return all(c.state == "stopped" for c in self.children)

    def health(self) -> tuple[bool, list[str]]:
        """Healthy when every follower runs; otherwise one line per follower that does not."""
        problems = []
        for c in self.children:
            if c.state == "restarting":
                problems.append(f"follower {c.name} restarting (restart {c.restarts + 1}): {c.reason}")
            elif c.state != "running":
                problems.append(f"follower {c.name} {c.state}: {c.reason}")
            elif (slow := deadline.slow(c.name)) is not None:
                problems.append(slow)
        return not problems, problems

    def _launch(self, child: Child) -> None:
        self._set(child, "starting")
        try:
            child.query, child.topics = self._start(child.follower)
        except Exception as err:  # a start that fails is a failure like any other: classified below
            self._failed(child, err, str(err))
            return
        progress = child.query.lastProgress
        child.started_batch = progress["batchId"] if progress else None
        self._set(child, "running")
        log.info("follower=%s state=running restarts=%d", child.name, child.restarts)

    def _watch(self, child: Child) -> None:
        query = child.query
        if query.isActive:
            overdue = deadline.overdue(child.name)
            if overdue is not None:
                self._cancel(child, overdue)
                return
            # lastProgress walks Spark's progress object over py4j, key by key: only when it matters.
            progress = query.lastProgress if child.failures_in_row else None
            if progress and progress["batchId"] != child.started_batch:
                child.failures_in_row = 0  # it committed a batch since its restart: the fault has passed
                batching.unshrink(child.name)
            return
        error = query.exception()
        if error is None:  # stopped without an error: only ``--once`` queries end by themselves
            self._set(child, "stopped")
            child.reason = "its query ended"
            return
        text = str(error)
        self._failed(child, text, text, in_batch=True)

    def _cancel(self, child: Child, why: str) -> None:
        """Stop a query whose batch is past its deadline (Spark cancels the batch's jobs), then restart it later.

        A stop that does not return within ``deadline.CANCEL_GRACE_S`` leaves a
        thread the JVM cannot free: ``Stuck`` asks the daemon to start its
        process again.
        """
        log.error("follower=%s %s", child.name, why)
        metrics.BATCHES_CANCELLED.labels(child.name).inc()
        stopped: list[bool] = []
        stopper = threading.Thread(
            target=_stop_quietly, args=(child.query, stopped), name=f"cdcsync-cancel-{child.name}", daemon=True
        )
        stopper.start()
        stopper.join(deadline.CANCEL_GRACE_S + 5)  # the query's own stopTimeout is CANCEL_GRACE_S (cdcsync.spark)
        deadline.end(child.name)
        if not stopped:
            raise Stuck(f"follower {child.name}: {why}, and its query did not stop in {deadline.CANCEL_GRACE_S:.0f} s")
        self._failed(child, why, why)

    def _check_position(self, child: Child) -> None:
        assert self._check is not None
        try:
            self._check(child.follower, child.topics)
        except Relaunch as news:
            log.info("follower=%s relaunch: %s", child.name, news)
            child.query.stop()
            self._launch(child)
        except FatalError as err:
            child.query.stop()
            self._failed(child, err, str(err))
        except Exception as err:  # Kafka unreachable for the check: the query itself will notice
            log.warning("follower=%s position check skipped: %s", child.name, err)

    def _failed(self, child: Child, error: BaseException | str, text: str, in_batch: bool = False) -> None:
        reason = _reason(text) or type(error).__name__
        if batching.shrink(child.name, text):
            reason = f"a batch too large for the driver ({reason}); the next takes fewer records"
        if permanent(error) and (not in_batch or child.failures_in_row >= 1):
            child.reason = _fatal_line(text) or reason
            self._set(child, "stopped")
            log.error("follower=%s state=stopped reason=%s", child.name, text.strip()[:2000])
            return
        child.failures_in_row += 1
        delay = backoff_s(child.failures_in_row)
        child.next_start = time.monotonic() + delay
        child.reason = reason
        self._set(child, "restarting")
        log.warning(
            "follower=%s state=restarting failures_in_row=%d retry_in_s=%.0f error=%s",
            child.name,
            child.failures_in_row,
            delay,
            reason,
        )

    def _set(self, child: Child, state: str) -> None:
        child.state = state
        for s in STATES:
            metrics.FOLLOWER_STATE.labels(child.name, s).set(1 if s == state else 0)


def _stop_quietly(query: Any, stopped: list[bool]) -> None:
    try:
        query.stop()
        stopped.append(True)
    except Exception as err:  # spark.sql.streaming.stopTimeout passed: its batch thread is still there
        log.warning("query %s did not stop: %s", getattr(query, "name", "?"), str(err).splitlines()[0][:300])


def _reason(text: str) -> str:
    """The line of a failure an operator reads: the last cdcsync error raised, else the first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    ours = [line for line in lines if _OUR_ERROR.match(line)]
    return (ours[-1] if ours else lines[0] if lines else "")[:500]


def _fatal_line(text: str) -> str:
    """The ``FatalError: ...`` line of a batch's traceback: what the operator must read."""
    match = _FATAL_IN_BATCH.search(text)
    if not match:
        return ""
    return text[match.start() :].splitlines()[0][:1000]
