"""One cdcsync writer at a time per Delta table, across threads and processes.

Every write cdcsync makes to a Delta table reads all of it (a MERGE on
``_cdcsync_id``, an overwrite), so two at once conflict in Delta's optimistic
commit: the later one fails (``ConcurrentAppendException``) and must run
again. Two cdcsync writers meet on one table during a reindex: its catch-up
and its switch write the live table while the daemon keeps merging into it
(``snapshot.reindex``, steps 4 and 5), and the staged and live tables share
one history table. A daemon that commits every few seconds can make a
reindex MERGE that takes as long lose every retry; CI saw eight in a row.

So they take turns: ``one_writer(path)`` holds an ``flock`` (filelock's
``FileLock``) on ``<dir>/.<table>.lock``, beside the table, for the write and its commit. The
OS releases it when the holder exits, however it dies. A writer that waits
long logs who holds the lock, and gives up after ``WAIT_S`` with a
``RetryableError`` naming it (the follower retries the batch).

Only tables on the local file system (a plain path or a ``file:`` URI) are
locked: on object stores and HDFS there is no shared lock file to take, and
a conflict stays what Delta makes it, a ``RetryableError`` the follower
retries. Writers other than cdcsync (an ``OPTIMIZE`` run by hand) never take
the lock either; the same retry covers them.

Different tables do not conflict, so one batch's tables are written
``delta.tables_at_once`` at a time (``each_table``; bench.delta_tables): a MERGE is mostly a fixed
cost of ~19 small Spark jobs one after the other, and a second MERGE's jobs
fill the cores the first leaves idle between its own.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

from filelock import FileLock, Timeout

from cdcsync.errors import RetryableError

log = logging.getLogger(__name__)

WAIT_S = 900.0  # a publish copies the whole table; longer than that, something is stuck
SAY_AFTER_S = 30.0
_held = threading.local()  # paths this thread holds: a nested write of the same table must not wait on itself
T = TypeVar("T")


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
    # An flock (no soft fallback: a file system without flock fails the write, as it always did); the file stays
    # after release, and holds who has the lock for the waiters' messages.
    writer = FileLock(lock, mode=0o644, fallback_to_soft=False, on_acquired=_say_who)
    _take(writer, lock, path, wait_s)
    try:
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
    finally:
        writer.release()


def _say_who(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} ({threading.current_thread().name})".encode(), 0)


def _take(writer: FileLock, lock: Path, path: str, wait_s: float) -> None:
    """Acquire ``writer``; after ``SAY_AFTER_S`` say who holds it, after ``wait_s`` give up naming them."""
    started = time.monotonic()
    try:
        writer.acquire(timeout=min(SAY_AFTER_S, wait_s))
        return
    except Timeout:
        waited = time.monotonic() - started
    if waited < wait_s:
        log.warning("table=%s waiting_for=%r lock=%s waited_s=%.0f", path, _holder(lock), lock, waited)
        try:
            writer.acquire(timeout=wait_s - waited)
            return
        except Timeout:
            pass
    raise RetryableError(
        f"{path}: {_holder(lock)} has been writing the table for over {wait_s:g} s (lock {lock}); "
        "if that process is stuck, stop it"
    ) from None


def _holder(lock: Path) -> str:
    """Who holds the lock, as the holder wrote it in the lock file."""
    try:
        with open(lock, "rb") as file:
            return file.read(200).decode(errors="replace").strip() or "another writer"
    except OSError:
        return "another writer"


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
