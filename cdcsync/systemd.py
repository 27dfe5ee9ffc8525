"""systemd's notify protocol, for ``Type=notify`` with a watchdog (deploy/systemd/cdcsync.service).

``notify`` sends one state line to ``$NOTIFY_SOCKET`` (a Unix datagram
socket; ``@`` starts a name in the abstract namespace), and does nothing
outside systemd. The daemon says ``READY=1`` once its followers are started
and ``STOPPING=1`` on a signal; ``Watchdog.pet`` says ``WATCHDOG=1`` at half
the unit's ``WatchdogSec``, called from the supervisor's loop alone, so a
loop that hangs (a call into a JVM that never answers) stops the petting and
systemd restarts the daemon. Written here rather than taken from a library:
the protocol is one datagram.
"""

from __future__ import annotations

import os
import socket
import time


def notify(state: str) -> bool:
    """Send ``state`` (``READY=1``, ``WATCHDOG=1``, ...) to systemd; False when not run by it, or not reading."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        try:  # never wait: a receiver that does not read (its queue full) must not stop the supervisor's loop
            sock.send(state.encode(), socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
    return True


class Watchdog:
    """``WATCHDOG=1`` at half of ``$WATCHDOG_USEC``, however often ``pet`` is called; nothing without one."""

    def __init__(self) -> None:
        usec = os.environ.get("WATCHDOG_USEC", "")
        owner = os.environ.get("WATCHDOG_PID")
        mine = owner is None or owner == str(os.getpid())
        self.every_s = int(usec) / 2e6 if usec.isdigit() and mine else None
        self._last = 0.0

    def pet(self) -> None:
        if self.every_s is None:
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            notify("WATCHDOG=1")
            self._last = now
