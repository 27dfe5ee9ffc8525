"""The local stack's processes: where its state lives, and which process runs, under whom, started and stopped how.

Standard library only (stack.py runs before the project's virtualenv exists).
Every check of "does it run" reads /proc: a pid file records the start time
beside the pid, because pids wrap (at 32768 on our machines) and a recorded pid
may belong to another process since; a killed process its parent has not
reaped yet (a zombie) does not run.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path


def _state_dir() -> Path:
    """cdcsync's own rule (cdcsync/state.py, standard library only), read from the checkout by its path: the
    stack runs before the project is installed, and this leaves sys.path alone."""
    spec = importlib.util.spec_from_file_location("_cdcsync_state", Path(__file__).parents[2] / "cdcsync/state.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.state_dir())


STATE = _state_dir()
DATA, LOGS, RUN, CONF = STATE / "data", STATE / "logs", STATE / "run", STATE / "conf"
SERVICE_USER = os.environ.get("CDCSYNC_SERVICE_USER", "cdcsync") if os.geteuid() == 0 else None


class StackError(Exception):
    """A component failed; the message names it and where to look."""


def _user_ids() -> tuple[int, int] | None:
    if SERVICE_USER is None:
        return None
    entry = pwd.getpwnam(SERVICE_USER)
    return entry.pw_uid, entry.pw_gid


def own(*paths: Path) -> None:
    """Give the service user the paths it writes (a no-op when not root)."""
    ids = _user_ids()
    for path in paths:
        if not path.exists():
            path.mkdir(parents=True)
        if ids:
            for root, dirs, files in os.walk(path):
                for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                    os.chown(name, *ids)


def run_as_service(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    ids = _user_ids()
    if ids:
        kwargs.update(user=ids[0], group=ids[1], extra_groups=[])
    return subprocess.run(argv, check=False, capture_output=True, text=True, **kwargs)


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first), or [] when there is no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def zombie(pid: int) -> bool:
    """PID exited and its parent has not reaped it yet.

    After `kill -9` that lasts as long as the parent (often pid 1) takes to
    reap: seconds. The process does not run, but its pid is still taken.

    The pid's own state is its main thread's. That thread can be a zombie while
    others still exit: Redis's background threads finishing an fsync, say. The
    open files, its listening socket among them, close with the last thread, so
    the process is gone only when every thread is.
    """
    if stat_fields(pid)[:1] not in (["Z"], ["X"]):
        return False
    for task in glob.glob(f"/proc/{pid}/task/[0-9]*"):
        try:
            state = Path(task, "stat").read_text().rsplit(")", 1)[1].split()[:1]
        except (OSError, IndexError):
            continue  # exited while we looked
        if state not in (["Z"], ["X"]):
            return False
    return True


def proc_start_time(pid: int) -> str | None:
    """When PID started (clock ticks since boot), or None when no such process runs (a zombie does not)."""
    fields = stat_fields(pid)
    if len(fields) < 20 or zombie(pid):
        return None
    return fields[19]


def pidfile(name: str) -> Path:
    return RUN / f"{name}.pid"


def read_pid(name: str) -> int | None:
    """The pid this script recorded for NAME, if that very process still runs."""
    try:
        pid_s, started = pidfile(name).read_text().split()
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    # A recycled pid belongs to someone else: compare the recorded start time.
    return pid if proc_start_time(pid) == started else None


def write_pid(name: str, pid: int) -> None:
    pidfile(name).write_text(f"{pid} {proc_start_time(pid)}\n")


def spawn(name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    log = open(LOGS / f"{name}.log", "ab")
    kwargs: dict = {}
    ids = _user_ids()
    if ids:
        kwargs.update(user=ids[0], group=ids[1], extra_groups=[])
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        **kwargs,
    )
    write_pid(name, proc.pid)
    return proc.pid


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in glob.glob("/proc/[0-9]*"):
        child = int(entry.rsplit("/", 1)[1])
        parent = stat_fields(child)[1:2]
        if parent:
            children.setdefault(int(parent[0]), []).append(child)
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def rss_bytes(pid: int) -> int:
    total = 0
    for p in descendants(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def terminate(name: str, pid: int, timeout: float = 60) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 10)
        while time.monotonic() < deadline and proc_start_time(pid) is not None:
            _reap(pid)
            time.sleep(0.2)
        if proc_start_time(pid) is None:
            break
        print(f"  {name}: still running after SIGTERM, sending SIGKILL", flush=True)
    _reap(pid)  # exited: our own child must not stay a zombie
    pidfile(name).unlink(missing_ok=True)


def kill(name: str, pid: int) -> None:
    """SIGKILL NAME's process group and return once the process no longer runs (a signal is delivered later)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # exited meanwhile
        pass
    deadline = time.monotonic() + 30
    while proc_start_time(pid) is not None:
        if time.monotonic() > deadline:
            raise StackError(f"{name}: pid {pid} still runs 30s after SIGKILL")
        _reap(pid)
        time.sleep(0.05)
    _reap(pid)
    print(f"  {name:<14} killed (pid {pid})", flush=True)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def cmdline(pid: int) -> list[bytes] | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


def tail(name: str, lines: int = 15) -> str:
    """The last ``lines`` lines of a component's log, indented: what an error about it shows."""
    try:
        text = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "  (no log written)"
    return "\n".join("  | " + line for line in text)
