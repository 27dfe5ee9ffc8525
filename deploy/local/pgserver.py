"""The local stack's Postgres: its server's binaries, the postmaster of the stack's data directory, its start and stop.

Standard library only, like ``stack.py``. Postgres is the one component not
spawned by ``processes.spawn``: ``pg_ctl`` starts it and writes its pid to
``postmaster.pid``, a file that outlives a killed postmaster, and whose pid may
since belong to another process (pids wrap). So whether it runs is read from
that file and the process's argv.
"""

from __future__ import annotations

import glob
import os
import time

import configs
from processes import (
    DATA,
    LOGS,
    RUN,
    StackError,
    cmdline,
    own,
    proc_start_time,
    run_as_service,
    stat_fields,
    tail,
    zombie,
)


def pg_bin(tool: str) -> str:
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not versions:
        raise StackError("postgres: no server under /usr/lib/postgresql; run deploy/local/install.sh")
    return f"{versions[-1]}/{tool}"


def pg_lock_pid() -> int | None:
    """The pid postmaster.pid names; the file outlives a killed postmaster."""
    try:
        return int((DATA / "postgres/postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def pg_pid() -> int | None:
    """The postmaster of this data directory, if it runs.

    The pid in postmaster.pid may since belong to another process (pids wrap):
    the process must be one started on this data directory.
    """
    pid = pg_lock_pid()
    if pid is None or proc_start_time(pid) is None:
        return None
    return pid if _on_data_dir(cmdline(pid)) else None


def _on_data_dir(argv: list[bytes] | None) -> bool:
    """Whether a process's argv names this data directory, as pg_ctl starts the postmaster (-D)."""
    return os.fsencode(DATA / "postgres") in (argv or [])


def pg_wait_gone(timeout: float = 60) -> None:
    """Wait while the postmaster postmaster.pid names has been killed but is not gone yet.

    Postgres refuses to start while that pid exists. After `kill -9` the
    process dies, then stays a zombie until its parent (often pid 1) reaps it:
    seconds. A live process of another program with the recycled pid does
    not hold Postgres back and is not waited for.
    """
    pid = pg_lock_pid()
    deadline = time.monotonic() + timeout
    while pid is not None and stat_fields(pid):
        argv = cmdline(pid)
        dying = zombie(pid) or not any(argv or [])  # a dying process's argv reads empty
        if not (dying or _on_data_dir(argv)):
            return  # another program's process
        if time.monotonic() > deadline:
            parent = (stat_fields(pid)[1:2] or ["?"])[0]
            raise StackError(
                f"postgres: the postmaster postmaster.pid names (pid {pid}) is still there after "
                f"{timeout:.0f}s (parent pid {parent}); Postgres will not start while it exists"
            )
        time.sleep(0.2)


def pg_start(env: dict[str, str]) -> None:
    data = DATA / "postgres"
    if not (data / "PG_VERSION").exists():
        own(data)
        pwfile = RUN / "pg.pw"
        pwfile.write_text("postgres\n")
        own(pwfile)
        done = run_as_service(
            [
                pg_bin("initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--pwfile",
                str(pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
            ]
        )
        pwfile.unlink()
        if done.returncode:
            raise StackError(f"postgres: initdb failed\n{done.stdout}{done.stderr}")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(configs.postgresql_conf(env, RUN))
    pg_wait_gone()
    log = LOGS / "postgres.log"
    done = run_as_service([pg_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start"])
    if done.returncode:
        raise StackError(f"postgres failed to start; log: {log}\n{done.stdout}{done.stderr}\n{tail('postgres')}")
    psql = [pg_bin("psql"), "-h", str(RUN), "-p", env["PG_PORT"], "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qtA"]
    done = run_as_service([*psql, "-d", "postgres"], input=configs.postgres_provisioning(env))
    if done.returncode:
        raise StackError(f"postgres: provisioning role/database failed\n{done.stderr}")


def pg_stop(_pid: int) -> None:
    run_as_service([pg_bin("pg_ctl"), "-D", str(DATA / "postgres"), "-m", "fast", "-w", "-t", "60", "stop"])
