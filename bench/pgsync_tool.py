"""PGSync for ``bench.documents``: its own virtualenv, the proxy it needs, its daemon, and removing what it made.

PGSync (``PGSYNC_VERSION``, from PyPI) is installed on first use into a
virtualenv of its own beside the project's (``<state>/bench-pgsync-venv``;
``--pgsync-venv``), never into the project's: its pins (elasticsearch 7.17,
psycopg2, SQLAlchemy) are not the project's. It is configured the way its
README says, by environment variables (``PG_*``, ``ELASTICSEARCH_URL``,
``REDIS_*``, ``CHECKPOINT_PATH``), and run as its README runs it:
``bootstrap --config schema.json`` (a replication slot named after the
database and index, a trigger per table, a function and a materialized view
in the tables' schema), then ``pgsync --config schema.json --daemon`` (a full
sync, then the changes: the triggers' notifications queued in Redis, the
slot read for what they missed).

What it makes, and how it goes: the slot by ``bootstrap --teardown`` and
then by name if it is still there (only that name); the triggers, function
and view with the schema the bench drops; its Redis queue (``queue:<slot>``
and ``queue:<slot>:meta``, in ``--pgsync-redis-db``) by name; its checkpoint
file with the bench's temporary directory; its index by the bench.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ENV, say, stop_daemon

PGSYNC_VERSION = "7.3.0"


def ensure_venv(venv: Path) -> Path:
    """The virtualenv's python, with PGSync ``PGSYNC_VERSION`` in it (made on first use, saying so)."""
    python = venv / "bin" / "python"
    if python.exists():
        probe = subprocess.run([str(python), "-c", "import pgsync; print(pgsync.__version__)"],
                               capture_output=True, text=True)  # fmt: skip
        if probe.returncode == 0 and probe.stdout.strip() == PGSYNC_VERSION:
            return python
    say(f"pgsync: installing pgsync=={PGSYNC_VERSION} from PyPI into a virtualenv of its own, {venv} ...")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pgsync=={PGSYNC_VERSION}"], check=True)
    say(f"pgsync: installed ({venv / 'bin'}: bootstrap, pgsync)")
    return python


def slot_name(index: str) -> str:
    """PGSync's replication slot (and Redis queue) name: ``<database>_<index>``, word characters only."""
    return "".join(c for c in f"{ENV['PG_DATABASE'].lower()}_{index}" if c.isalnum() or c == "_")


class PGSync:
    """One PGSync deployment of one schema.json, in ``tmp``, writing to Elasticsearch through ``es_url``."""

    def __init__(self, python: Path, tmp: Path, schema: list[dict[str, Any]], es_url: str, redis_db: int) -> None:
        self.python, self.tmp = python, tmp
        self.index = schema[0]["index"]
        self.schema_path = tmp / "schema.json"
        self.schema_path.write_text(json.dumps(schema, indent=2))
        self.log = tmp / "pgsync.log"
        self.redis_db = redis_db
        self.env = {
            "PATH": f"{python.parent}:{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", "/root"),
            "PG_HOST": "127.0.0.1",
            "PG_PORT": ENV["PG_PORT"],
            "PG_USER": ENV["PG_USER"],
            "PG_PASSWORD": ENV["PG_PASSWORD"],
            "ELASTICSEARCH_URL": es_url,
            "REDIS_HOST": "127.0.0.1",
            "REDIS_PORT": ENV["REDIS_PORT"],
            "REDIS_DB": str(redis_db),
            "CHECKPOINT_PATH": str(tmp),
            "CONSOLE_LOGGING_HANDLER_MIN_LEVEL": "WARNING",
            "LOG_INTERVAL": "10",
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.bootstrapped = False

    def _run(self, script: str, *args: str, timeout: float = 600) -> None:
        command = [str(self.python.parent / script), "--config", str(self.schema_path), *args]
        with self.log.open("ab") as log:
            done = subprocess.run(command, cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"pgsync: `{' '.join([script, *args])}` exited {done.returncode}: {self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def bootstrap(self) -> float:
        """``bootstrap``: slot, triggers, function, view. Its seconds."""
        started = time.monotonic()
        self.bootstrapped = True  # set first: a bootstrap that fails half-way still gets torn down
        self._run("bootstrap")
        return time.monotonic() - started

    def start(self) -> subprocess.Popen[bytes]:
        """The daemon, as ``python -m pgsync.sync`` (its ``pgsync`` script's module), so its RSS is a python's."""
        command = [str(self.python), "-m", "pgsync.sync", "--config", str(self.schema_path), "--daemon"]
        self.process = subprocess.Popen(command, cwd=self.tmp, env=self.env, stdout=self.log.open("ab"),
                                        stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        return self.process

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise SystemExit(f"pgsync exited ({self.process.returncode}): {self.tail()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_daemon(process, within_s=30)

    def teardown(self, pg: Any) -> None:
        """Remove the slot and the Redis queue (the schema's objects go with the schema); each step alone."""
        self.stop()
        if self.bootstrapped:
            try:
                self._run("bootstrap", "--teardown", timeout=300)
            except BaseException as err:  # noqa: BLE001  (the steps below remove what it would have)
                say(f"pgsync: bootstrap --teardown failed ({err}); removing its slot and queue by name")
        slot = slot_name(self.index)
        for _ in range(30):  # a slot still held by a dying walsender cannot be dropped yet
            held = pg.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if held is None:
                break
            if not held[0]:
                pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                break
            time.sleep(1)
        import redis

        r = redis.Redis(port=int(ENV["REDIS_PORT"]), db=self.redis_db)
        r.delete(f"queue:{slot}", f"queue:{slot}:meta")


def start_proxy(port: int, log: Path) -> subprocess.Popen[bytes]:
    """``bench.pgsync_proxy`` on ``port``, in front of the stack's Elasticsearch; returns once it listens."""
    upstream = f"http://127.0.0.1:{ENV['ES_PORT']}"
    proxy = subprocess.Popen([sys.executable, "-m", "bench.pgsync_proxy", str(port), upstream],
                             stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while "listening" not in log.read_text():
        if proxy.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the Elasticsearch proxy did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return proxy


def stop_proxy(proxy: subprocess.Popen[bytes] | None) -> None:
    if proxy is not None and proxy.poll() is None:
        os.killpg(proxy.pid, signal.SIGTERM)
        proxy.wait(30)
