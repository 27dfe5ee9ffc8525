"""How deploy/local/stack.py tells a running component from one that is gone: real processes, no services.

CI's kill -9 matrix once failed on ``stack.py up postgres`` 15 s after the
postmaster was killed: the pid in ``postmaster.pid`` still named a process (the
unreaped postmaster, or another process given the recycled pid; pids wrap at
32768 there), so ``up`` waited for it instead of starting Postgres, then gave up
with "postgres exited during start-up".
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "local"))
import pgserver  # noqa: E402
import processes  # noqa: E402
import stack  # noqa: E402


def _zombie() -> subprocess.Popen:
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.05)
    return child


def _wait_for_argv(proc: subprocess.Popen) -> None:
    # Popen returns once exec began; /proc/PID/cmdline is empty until the new program's arguments are in place.
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "no argv"
        time.sleep(0.01)


def test_an_exited_but_unreaped_process_is_not_running() -> None:
    child = _zombie()
    try:
        assert processes.proc_start_time(child.pid) is None
    finally:
        child.wait()


def test_the_postmaster_is_the_process_started_on_this_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "postgres"
    data.mkdir()
    monkeypatch.setattr(pgserver, "DATA", tmp_path)
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    other = subprocess.Popen(sleep)  # alive, but started on no data directory: a recycled pid
    postmaster = subprocess.Popen([*sleep, "-D", str(data)])  # argv as pg_ctl starts postgres
    try:
        for proc in (other, postmaster):
            (data / "postmaster.pid").write_text(f"{proc.pid}\n{data}\n1795691008\n15432\n")
            _wait_for_argv(proc)
            assert pgserver.pg_pid() == (proc.pid if proc is postmaster else None)
    finally:
        for proc in (other, postmaster):
            proc.kill()
            proc.wait()


def test_up_starts_a_component_whose_leftover_process_exits_while_up_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    leftover = subprocess.Popen(["sleep", "1"])  # alive when `up` looks, never healthy, gone a second later
    started: list[bool] = []

    def pid() -> int | None:
        if started:
            return 1
        return leftover.pid if leftover.poll() is None else None

    def start() -> None:
        started.append(True)

    comp = stack.Component("fake", "PG_PORT", start, lambda: bool(started), 30, pid, lambda _pid: None)
    monkeypatch.setitem(stack.COMPONENTS, "fake", comp)
    stack.up(["fake"])
    assert started == [True]


_MAIN_THREAD_EXITS_FIRST = """
import ctypes, socket, sys, threading, time

def hold() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    time.sleep(float(sys.argv[1]))

threading.Thread(target=hold).start()
time.sleep(0.5)
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_whose_main_thread_exited_first_runs_while_another_holds_its_socket() -> None:
    # After kill -9, Redis's main thread can be a zombie while a background thread still finishes an
    # fsync; `stack.py up redis` then found port 16379 taken. The process runs until its last thread exits.
    proc = subprocess.Popen([sys.executable, "-c", _MAIN_THREAD_EXITS_FIRST, "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while processes.stat_fields(proc.pid)[:1] != ["Z"]:
            assert time.monotonic() < deadline, "the main thread did not exit"
            time.sleep(0.05)
        assert not processes.zombie(proc.pid)
        assert processes.proc_start_time(proc.pid) is not None
        with pytest.raises(OSError):
            socket.create_server(("127.0.0.1", port)).close()  # still held: the process is not gone
        while not processes.zombie(proc.pid):
            assert time.monotonic() < deadline, "the last thread did not exit"
            time.sleep(0.05)
        socket.create_server(("127.0.0.1", port)).close()
    finally:
        proc.kill()
        proc.wait()
