"""One cdcsync writer at a time per Delta table, across threads and processes.

Every write cdcsync makes to a Delta table reads all of it (a MERGE on
``_cdcsync_id``, an overwrite), so two at once conflict in Delta's optimistic
commit: the later one fails (``ConcurrentAppendException``) and must run
again. Two cdcsync writers meet on one table during a reindex: its catch-up
and its switch write the live table while the daemon keeps merging into it
(``snapshot.reindex``, steps 4 and 5), and the staged and live tables share
one history table. A daemon that commits every few seconds can make a
reindex MERGE that takes as long lose every retry; CI saw eight in a row.

So they take turns: ``one_writer(path)`` holds an ``flock`` on
``<dir>/.<table>.lock``, beside the table, for the write and its commit. The
OS releases it when the holder exits, however it dies. A writer that waits
long logs who holds the lock, and gives up after ``WAIT_S`` with a
``RetryableError`` naming it (the follower retries the batch).

Only tables on the local file system (a plain path or a ``file:`` URI) are
locked: on object stores and HDFS there is no shared lock file to take, and
a conflict stays what Delta makes it, a ``RetryableError`` the follower
retries. Writers other than cdcsync (an ``OPTIMIZE`` run by hand) never take
the lock either; the same retry covers them.

Different tables do not conflict, so one batch's tables are written
``TABLES_AT_ONCE`` at a time (``each_table``): a MERGE is mostly a fixed
cost of ~19 small Spark jobs one after the other, and a second MERGE's jobs
fill the cores the first leaves idle between its own.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

from cdcsync.errors import FatalError, RetryableError

log = logging.getLogger(__name__)

WAIT_S = 900.0  # a publish copies the whole table; longer than that, something is stuck
SAY_AFTER_S = 30.0
_held = threading.local()  # paths this thread holds: a nested write of the same table must not wait on itself
# A batch's tables MERGEd at once (bench.delta_tables). Each holds its share of the batch and its own tasks'
# buffers, so the memory bound of a batch (sync.batching) still holds; more than the cores buys nothing.
TABLES_AT_ONCE = 2
T = TypeVar("T")


def tables_at_once() -> int:
    """``TABLES_AT_ONCE``, or ``CDCSYNC_DELTA_TABLES_AT_ONCE`` when set (1 MERGEs one table at a time)."""
    raw = os.environ.get("CDCSYNC_DELTA_TABLES_AT_ONCE", str(TABLES_AT_ONCE)).strip()
    if not raw.isdigit() or int(raw) < 1:
        raise FatalError(f"CDCSYNC_DELTA_TABLES_AT_ONCE={raw!r}: want a whole number of tables, 1 or more")
    return int(raw)


def lock_file(path: str) -> Path | None:
    """``<dir>/.<table>.lock`` for a table on the local file system, else None."""
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        return None
    table = Path(parsed.path if parsed.scheme else path)
    return table.parent / f".{table.name}.lock"


@contextmanager
def one_writer(path: str, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the table's writer lock for the block (module docstring); re-entrant within one thread."""
    lock = lock_file(path)
    held: set[str] = _held.__dict__.setdefault("paths", set())
    if lock is None or path in held:
        yield
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _take(fd, lock, path, wait_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({threading.current_thread().name})".encode(), 0)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
    finally:
        os.close(fd)  # releases the lock


def _take(fd: int, lock: Path, path: str, wait_s: float) -> None:
    started = time.monotonic()
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - started
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another writer"
            if waited >= wait_s:
                raise RetryableError(
                    f"{path}: {holder} has been writing the table for over {wait_s:g} s (lock {lock}); "
                    "if that process is stuck, stop it"
                ) from None
            if waited >= SAY_AFTER_S and not said:
                log.warning("table=%s waiting_for=%r lock=%s waited_s=%.0f", path, holder, lock, waited)
                said = True
            time.sleep(0.05)


def each_table(calls: Sequence[Callable[[], T]], at_once: int) -> list[T]:
    """Every call's result in order, ``at_once`` of them running at a time; each call writes a table of its own.

    The first call of each group runs in this thread, the others in threads that take this thread's Spark
    local properties (a streaming query's job group: stopping the query cancels their jobs too). Every call
    of a group runs to its end; then the first error raised, if any, is raised here.
    """
    from pyspark import InheritableThread

    out: dict[int, T] = {}
    errors: dict[int, BaseException] = {}

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except BaseException as err:  # raised in the caller's thread below
            errors[i] = err

    step = max(1, at_once)
    for first in range(0, len(calls), step):
        threads = [InheritableThread(run, args=(i,)) for i in range(first + 1, min(first + step, len(calls)))]
        for thread in threads:
            thread.start()
        run(first)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[min(errors)]
    return [out[i] for i in range(len(calls))]
