"""The Delta writer lock's wait (sync.sinks.delta_writers): who holds it is written in the file, said, then named."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from cdcsync.errors import RetryableError
from cdcsync.sync.sinks import delta_writers
from cdcsync.sync.sinks.delta_writers import one_writer


def test_the_holder_writes_who_it_is_and_leaves_the_file_for_the_next(tmp_path: Path) -> None:
    table, lock = str(tmp_path / "items"), tmp_path / ".items.lock"
    with one_writer(table):
        held = lock.read_text()
        assert held == f"pid {os.getpid()} ({threading.current_thread().name})"
    assert lock.exists()  # waiters share the file; it is never removed
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: anyone may take it now
    finally:
        os.close(fd)


def test_a_long_wait_is_said_once_naming_the_holder_then_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(delta_writers, "SAY_AFTER_S", 0.1)
    table, lock = str(tmp_path / "items"), tmp_path / ".items.lock"
    lock.write_text("pid 4242 (reindex)")
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(RetryableError) as raised, one_writer(table, wait_s=0.4):
            pass
    finally:
        os.close(fd)
    assert str(raised.value) == (
        f"{table}: pid 4242 (reindex) has been writing the table for over 0.4 s (lock {lock}); "
        "if that process is stuck, stop it"
    )
    said = [r.getMessage() for r in caplog.records if "waiting_for" in r.getMessage()]
    assert len(said) == 1 and "waiting_for='pid 4242 (reindex)'" in said[0], said
    assert lock.read_text() == "pid 4242 (reindex)"  # waiting never erased what the holder wrote


def test_a_writer_that_waited_takes_the_lock_once_it_is_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delta_writers, "SAY_AFTER_S", 0.05)
    table, lock = str(tmp_path / "items"), tmp_path / ".items.lock"
    lock.write_text("pid 4242 (reindex)")
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.3, os.close, (fd,)).start()  # the holder ends after the first wait was said
    with one_writer(table, wait_s=10):
        assert lock.read_text().startswith(f"pid {os.getpid()} ")
