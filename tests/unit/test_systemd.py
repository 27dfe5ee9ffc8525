"""The notify protocol against a real Unix datagram socket, and the service unit's sandbox as systemd scores it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cdcsync import systemd
from tests.tools import required

UNIT = Path(__file__).resolve().parents[2] / "deploy/systemd/cdcsync.service"


def listening() -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(Path(tempfile.mkdtemp(prefix="cdcsync-sd-")) / "notify")
    sock.bind(path)
    sock.settimeout(2)
    return sock, path


def test_notify_sends_one_datagram_and_does_nothing_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert systemd.notify("READY=1") is False
    sock, path = listening()
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert systemd.notify("READY=1") is True
    assert sock.recv(100) == b"READY=1"


def test_a_socket_in_the_abstract_namespace_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"cdcsync-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    systemd.notify("STOPPING=1")
    assert sock.recv(100) == b"STOPPING=1"


def test_the_watchdog_is_petted_at_half_its_interval_and_only_for_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    sock, path = listening()
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # pet every 0.2 s
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    watchdog = systemd.Watchdog()
    started = time.monotonic()
    while time.monotonic() - started < 0.5:
        watchdog.pet()  # the supervisor's loop calls it every 0.5 s; here far more often
        time.sleep(0.01)
    sock.settimeout(0.1)
    pets = []
    while True:
        try:
            pets.append(sock.recv(100))
        except TimeoutError:
            break
    assert pets == [b"WATCHDOG=1"] * 3  # at 0, 0.2 and 0.4 s
    monkeypatch.setenv("WATCHDOG_PID", "1")  # the watchdog is another process's
    assert systemd.Watchdog().every_s is None


def test_the_service_unit_is_sandboxed_to_an_ok_exposure_and_notifies() -> None:
    tool = required("systemd-analyze", "systemd")
    done = subprocess.run([tool, "security", "--offline=true", str(UNIT)], capture_output=True, text=True, timeout=60)
    score = re.search(r"Overall exposure level for cdcsync\.service: (\d+\.\d+)", done.stdout)
    assert score, done.stdout + done.stderr
    assert float(score[1]) <= 3.0, done.stdout
    text = UNIT.read_text()
    assert "\nType=notify\n" in text and re.search(r"\nWatchdogSec=\d+", text)


def test_a_receiver_that_does_not_read_never_blocks_the_sender(monkeypatch: pytest.MonkeyPatch) -> None:
    sock, path = listening()
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    started = time.monotonic()
    sent = [systemd.notify("WATCHDOG=1") for _ in range(200)]  # far past the socket's queue
    assert time.monotonic() - started < 5 and sent[0] and not sent[-1]
    assert sock.recv(100) == b"WATCHDOG=1"
