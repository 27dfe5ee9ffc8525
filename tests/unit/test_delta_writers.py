"""The Delta writers (sync.sinks.delta_writers) on plain files: the lock (where, who waits, gives up), each_table."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from cdcsync.errors import RetryableError
from cdcsync.sync.sinks.delta_writers import each_table, lock_file, one_writer


def test_a_local_table_is_locked_beside_itself_and_a_remote_one_not_at_all() -> None:
    assert lock_file("/lake/items") == Path("/lake/.items.lock")
    assert lock_file("file:///lake/items__history") == Path("/lake/.items__history.lock")
    assert lock_file("s3a://bucket/lake/items") is None


def test_a_second_writer_waits_for_the_first(tmp_path: Path) -> None:
    table, order = str(tmp_path / "items"), []
    first_in = threading.Event()

    def first() -> None:
        with one_writer(table):
            first_in.set()
            threading.Event().wait(0.3)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait()
    with one_writer(table):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]


def test_the_same_thread_may_nest_and_another_process_holding_it_is_named(tmp_path: Path) -> None:
    table = str(tmp_path / "items")
    with one_writer(table), one_writer(table):  # a write inside a write of the same table does not wait on itself
        pass
    fd = os.open(tmp_path / ".items.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"pid 4242 (reindex)", 0)
    try:
        with pytest.raises(RetryableError, match=r"pid 4242 \(reindex\) has been writing the table"):
            with one_writer(table, wait_s=0.2):
                pass
    finally:
        os.close(fd)


def test_each_table_runs_at_most_at_once_calls_together_and_keeps_their_order() -> None:
    running, most, lock = 0, 0, threading.Lock()

    def call(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        threading.Event().wait(0.05)
        with lock:
            running -= 1
        return n * n

    calls = [lambda n=n: call(n) for n in range(5)]
    assert each_table(calls, at_once=2) == [0, 1, 4, 9, 16]
    assert most == 2
    most = 0
    assert each_table(calls, at_once=1) == [0, 1, 4, 9, 16]
    assert most == 1


def test_each_table_lets_a_group_finish_then_raises_its_first_error() -> None:
    done: list[int] = []

    def call(n: int) -> int:
        if n in (1, 2):
            raise ValueError(f"table {n}")
        threading.Event().wait(0.05)
        done.append(n)
        return n

    with pytest.raises(ValueError, match="table 1"):
        each_table([lambda n=n: call(n) for n in range(5)], at_once=2)
    assert done == [0]  # table 0 (beside the failed 1) ran to its end; the next group never started
