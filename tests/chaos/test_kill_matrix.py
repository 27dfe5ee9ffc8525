"""The kill -9 matrix: each component killed mid-stream under a running daemon, then restarted; every store converges.

A write generator drives inserts, updates, deletes and primary-key updates,
with some wide rows, on Postgres and MariaDB at ``CDCSYNC_CHAOS_RATE``
changes/s (default 1000) into three followers (Elasticsearch, Redis, Delta).
One component is killed with SIGKILL (or a sink frozen with SIGSTOP) and
brought back by the project's own means (``stack.py up``, or a new
``cdcsync run``). After the writes stop, ``verify`` must report 0 missing,
0 stale and 0 extra for every follower with no manual step. The seconds from
the restart to each follower's clean ``verify`` go into the table
tests/chaos/conftest.py prints at the end of the run.

The writes that go on while the fault happens are bounded in time, not by how
long the daemon takes to start: a few transactions first, for every follower's
first batch (Spark's start under load took 1-5 minutes), then ``MID_STREAM_S``
of writes at the full rate before the fault, and 15 s more after the restart.

``make test`` runs a fixed subset (the daemon kill); ``make chaos`` runs
every row (the Postgres kill, which used to leave Postgres capture FAILED
for good; the broker kill, which used to stall Postgres capture behind an
orphaned slot, takes over four minutes to converge), with SIGSTOP lasting
``CDCSYNC_CHAOS_STOP_S`` (120 s there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdcsync.connectors.apply import apply
from tests.chaos.conftest import RESULTS, Recovery
from tests.chaos.daemon import daemon_config, start_daemon, wait_for_batches
from tests.chaos.recovery import CaptureClock, first_batches
from tests.integration.followers import drop_stores, follower_dicts
from tests.support import ENV, drop_capture, execute, source_dict, stack, uid, wait_streaming

RATE = int(os.environ.get("CDCSYNC_CHAOS_RATE", "1000"))
STOP_S = float(os.environ.get("CDCSYNC_CHAOS_STOP_S", "60"))
FOLLOWERS = ("search", "cache", "warehouse")
WARM_UP_TRANSACTIONS = 20  # per database, before the daemon starts: something for each follower's first batch
MID_STREAM_S = 30  # writes at RATE between the followers' first batches and the fault
long = pytest.mark.long
CASES = [
    pytest.param("kill", "kafka", id="kill-kafka", marks=long),
    pytest.param("kill", "postgres", id="kill-postgres", marks=long),
    pytest.param("kill", "run", id="kill-run"),
    pytest.param("kill", "connect", id="kill-connect", marks=long),
    pytest.param("kill", "mariadb", id="kill-mariadb", marks=long),
    pytest.param("kill", "elasticsearch", id="kill-elasticsearch", marks=long),
    pytest.param("kill", "redis", id="kill-redis", marks=long),
    pytest.param("stop", "elasticsearch", id="sigstop-elasticsearch", marks=long),
    pytest.param("stop", "redis", id="sigstop-redis", marks=long),
]


class Writer:
    """Transactions of ~10 changes each at ``RATE`` changes/s on one database, retried while it is down."""

    def __init__(self, kind: str, table: str) -> None:
        self.kind, self.table = kind, table
        self.stop = threading.Event()
        self.changes = 0
        self._i = 0  # transactions written
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def warm_up(self, transactions: int) -> None:
        """``transactions`` written at once, in this thread, before the paced writes start."""
        for _ in range(transactions):
            self._transaction()

    def _transaction(self) -> None:
        self._i += 1
        i, t = self._i, self.table
        base = i * 10
        wide = "x" * 40_000 if i % 50 == 0 else "row"
        statements = [
            f"INSERT INTO {t} VALUES " + ", ".join(f"({base + k}, {k}, '{wide if k == 0 else 'r'}')" for k in range(6)),
            f"UPDATE {t} SET v = v + 1 WHERE id IN ({base - 10}, {base - 9}, {base - 8})",
            f"DELETE FROM {t} WHERE id = {base - 7}",
            f"UPDATE {t} SET id = {base + 9} WHERE id = {base - 6}",  # a primary-key update
        ]
        while not self.stop.is_set():
            try:
                execute(self.kind, *statements)
                self.changes += 10
                return
            except Exception:  # the database is being killed or restarted: the same transaction again
                time.sleep(0.5)

    def _loop(self) -> None:
        per_s = max(RATE / 2 / 10, 1)  # two databases, ~10 changes per transaction
        while not self.stop.is_set():
            started = time.monotonic()
            self._transaction()
            time.sleep(max(0.0, 1 / per_s - (time.monotonic() - started)))


def table_ddl(kind: str, table: str) -> str:
    body = "TEXT" if kind == "postgres" else "MEDIUMTEXT"
    return f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL, body {body} NOT NULL)"


def offsets_behind(config_path: Path) -> dict[str, int]:
    """``cdcsync lag --json``: per follower, the offsets its checkpoint is behind the log (empty if lag fails)."""
    done = subprocess.run(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "lag", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        return {f["follower"]: f["offsets_behind"] for f in json.loads(done.stdout)["followers"]}
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}


def verify_each(config_path: Path, since: float, within_s: float) -> tuple[dict[str, float | None], str]:
    """``cdcsync verify --json`` every 5 s; per follower, seconds from ``since`` to its first clean report.

    A follower is verified once ``cdcsync lag`` finds it caught up with its log (or when lag cannot tell):
    each verify of the warehouse starts a Spark JVM, and one every few seconds took a core from the daemon
    that was catching up. Also what the last run said of the followers that never came clean (the counts,
    or verify's stderr), for the failure message: a red run in CI must say whether rows were missing, stale
    or extra, and where.
    """
    clean: dict[str, float | None] = dict.fromkeys(FOLLOWERS)
    last = ""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(v is None for v in clean.values()):
        behind = offsets_behind(config_path)
        todo = [f for f, v in clean.items() if v is None and behind.get(f, 0) == 0]
        if not todo:
            last = f"lag: offsets behind {behind}"
            time.sleep(5)
            continue
        done = subprocess.run(
            [sys.executable, "-m", "cdcsync", "--config", str(config_path), "verify", "--json", *todo],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        try:
            reports = json.loads(done.stdout)
        except json.JSONDecodeError:
            reports = []
        for follower in todo:
            mine = [r for r in reports if r["follower"] == follower]
            if mine and all(r["clean"] for r in mine):
                clean[follower] = round(time.monotonic() - since)
        dirty = [{k: v[:3] if isinstance(v, list) else v for k, v in r.items()} for r in reports if not r["clean"]]
        last = f"verify exit {done.returncode}: {dirty} {done.stderr[-1500:]}"
        if any(v is None for v in clean.values()):
            time.sleep(5)
    return clean, last


def wait_healthy(component: str, within_s: float = 180) -> None:
    deadline = time.monotonic() + within_s
    comp = stack.COMPONENTS[component]
    while comp.pid() is None or not comp.healthy():
        assert time.monotonic() < deadline, f"{component} not healthy {within_s}s after its restart"
        time.sleep(1)


@pytest.mark.parametrize("how,component", CASES)
def test_kill_matrix(how: str, component: str, tmp_path: Path) -> None:
    tag, table = f"t{uid()}", f"mx_{uid()}"
    tables = {"postgres": f"{table}_pg", "mariadb": f"{table}_ma"}  # one target per table in each sink
    for kind, name in tables.items():
        execute(kind, table_ddl(kind, name))
    sources = [
        source_dict("postgres", f"{tag}_pg", [f"public.{tables['postgres']}"]),
        source_dict("mariadb", f"{tag}_ma", [f"{ENV['MARIADB_DATABASE']}.{tables['mariadb']}"]),
    ]
    _, config_path, config = daemon_config(tmp_path, sources, follower_dicts(tag, tmp_path))
    log, daemon = tmp_path / "run.log", None
    writers = [Writer(kind, name) for kind, name in tables.items()]
    row = f"{'SIGSTOP' if how == 'stop' else 'kill -9'} {component}"
    try:
        apply(config)
        wait_streaming(config)
        for w in writers:
            w.warm_up(WARM_UP_TRANSACTIONS)
        daemon = start_daemon(config_path, log)
        wait_for_batches(log, FOLLOWERS, within_s=300)
        for w in writers:
            w.thread.start()
        time.sleep(MID_STREAM_S)
        if component == "run":
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(30)
            time.sleep(2)  # deploy/systemd's RestartSec after a first crash
            daemon = start_daemon(config_path, log)
        elif how == "kill":
            assert stack.main(["kill", component]) == 0
            time.sleep(15)
            assert stack.main(["up", component]) == 0
        else:
            pid = stack.COMPONENTS[component].pid()
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(STOP_S)
            finally:
                os.kill(pid, signal.SIGCONT)
        restarted, restarted_wall = time.monotonic(), time.time()
        capture = CaptureClock(config, restarted)
        if component != "run":
            wait_healthy(component)
        time.sleep(15)  # writes go on after the restart
        for w in writers:
            w.stop.set()
            w.thread.join(120)
        converged, last_verify = verify_each(config_path, restarted, within_s=600)
        capture.stop.set()
        batches = first_batches(log, restarted_wall, FOLLOWERS)
        RESULTS.append(
            Recovery(row, capture.seconds, {f: (batches[f], converged[f]) for f in FOLLOWERS},
                     sum(w.changes for w in writers))
        )  # fmt: skip
        text = log.read_text(errors="replace")
        problems = "\n".join(line for line in text.splitlines() if " ERROR " in line or " WARNING " in line)
        assert all(v is not None for v in converged.values()), (converged, last_verify, problems[-4000:], text[-3000:])
        assert daemon.poll() is None, text[-3000:]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(150) == 0, log.read_text()[-3000:]
        daemon = None
    finally:
        for w in writers:
            w.stop.set()
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGKILL)
        stack.main(["up"])  # whatever the test left down
        drop_capture(config)
        drop_stores(config, tag)
        for kind, name in tables.items():
            execute(kind, f"DROP TABLE IF EXISTS {name}")
