"""The Delta writers' lock (sync.sinks.delta_writers) on plain files: where it lives, who waits, who gives up."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from cdcsync.errors import RetryableError
from cdcsync.sync.sinks.delta_writers import lock_file, one_writer


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
