"""What both benchmarks share: the local stack's addresses, a one-table Postgres config, and cleaning up after it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy/local"))
import stack  # noqa: E402

ENV = stack.ENV


def stop_on_sigterm() -> None:
    """A SIGTERM ends the bench through its ``finally`` blocks (clean-up), as Ctrl-C does."""

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def start_daemon(
    config_path: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``cdcsync run`` on ``config_path`` with the default settings (no CDCSYNC_SPARK_* but ``env``'s), to ``log``."""
    command = [sys.executable, "-m", "cdcsync", "--config", str(config_path), "run", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCSYNC_SPARK_")} | (env or {})
    return subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop_daemon(daemon: subprocess.Popen[bytes] | None, within_s: float = 120) -> None:
    """Stop a process group as a service manager would: SIGTERM, ``within_s`` to stop (the daemon: between
    batches), then SIGKILL."""
    if daemon is None or daemon.poll() is not None:
        return
    os.killpg(daemon.pid, signal.SIGTERM)
    try:
        daemon.wait(within_s)
    except subprocess.TimeoutExpired:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(30)


def free_port() -> int:
    """A TCP port nothing listens on now, on the loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def one_table_doc(tag: str, table: str, followers: list[dict[str, Any]], state: Path, **source: Any) -> dict[str, Any]:
    """The config document capturing ``public.<table>`` of the stack's Postgres as source ``tag``."""
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": [
            {
                "name": tag,
                "kind": "postgres",
                "port": int(ENV["PG_PORT"]),
                "database": ENV["PG_DATABASE"],
                "user": ENV["PG_USER"],
                "password": ENV["PG_PASSWORD"],
                "tables": [f"public.{table}"],
                **source,
            }
        ],
        "followers": followers,
        "state_dir": str(state),
    }


def one_table_config(tag: str, table: str, followers: list[dict[str, Any]], state: Path, **source: Any) -> Any:
    """``one_table_doc``, loaded: a config followed by ``followers``."""
    from cdcsync.config import Config

    return Config.model_validate(one_table_doc(tag, table, followers, state, **source))


def three_followers(tag: str, tmp: Path, wanted: list[str] | None = None) -> list[dict[str, Any]]:
    """Elasticsearch, Redis and Delta followers on the local stack, each with its own names under ``tag``."""
    followers = [
        {"name": "search", "kind": "elasticsearch", "url": f"http://127.0.0.1:{ENV['ES_PORT']}", "prefix": f"{tag}-"},
        {"name": "cache", "kind": "redis", "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0", "prefix": tag},
        {"name": "warehouse", "kind": "delta", "path": str(tmp / "warehouse")},
    ]
    chosen = [f for f in followers if wanted is None or f["name"] in wanted]
    for f in chosen:
        f.update(dead_letter_topic=f"dlq.{tag}.{f['name']}", checkpoint_dir=str(tmp / f"ckpt-{f['name']}"))
    return chosen


def cleanup(config: Any, tag: str, table: str, pg: Any) -> None:
    """Remove the connector, its slot, publication, signal table and topics, the table, and every store named
    ``tag*``."""
    from cdcsync.connectors.remove import delete
    from cdcsync.connectors.topics import delete_topics

    delete(config, config.sources[0].name, topics=True, force=True)
    pg.execute(f"DROP TABLE IF EXISTS {table}")
    delete_topics(config, [f.dlq_topic for f in config.followers])
    empty_stores(tag)


def empty_stores(tag: str) -> None:
    """Remove every Elasticsearch index and Redis key named ``tag*``, then let Redis settle (``settle_redis``)."""
    import redis
    from elasticsearch import Elasticsearch

    # {tag}* and not {tag}-*: bench.bootstrap names its indexes {tag}raw-search, {tag}source-..., which stayed behind
    Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}").indices.delete(index=f"{tag}*", allow_no_indices=True)
    r = redis.Redis(port=int(ENV["REDIS_PORT"]))
    keys: list[bytes] = []
    for key in r.scan_iter(f"{tag}*", count=5000):  # a million keys: a round trip per key took minutes
        keys.append(key)
        if len(keys) >= 5000:
            r.unlink(*keys)
            keys = []
    if keys:
        r.unlink(*keys)
    settle_redis(r)


def settle_redis(r: Any, timeout: float = 300.0) -> None:
    """Rewrite Redis's append-only file now and wait for the rewrite to end.

    Redis rewrites its AOF by itself each time the file doubles, in a forked
    child whose CPU the budget counts as Redis's. Before, a phase inherited
    whatever file the earlier phases had grown (735 MB in one session), so
    whether a rewrite landed in it depended on the order of the phases.
    Rewritten first, every phase starts from the same compact file, and the
    rewrites inside it are the ones its own writes cause (a bootstrap of 1M
    rows caused several: it pays them, as it would on a user's server).
    """
    if r.info("persistence").get("aof_enabled") != 1:
        return
    import redis

    try:
        r.bgrewriteaof()
    except redis.ResponseError as err:  # one already running (or scheduled) does as well
        if "in progress" not in str(err) and "scheduled" not in str(err):
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = r.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
            return
        time.sleep(0.2)
    raise SystemExit(f"redis: the AOF rewrite did not end within {timeout:.0f} s")


class PeakRss:
    """The peak resident memory of a process and its descendants (the JVM, Spark's Python workers), sampled.

    ``sample()`` reads ``/proc``; call it every half second or so. ``peak``
    is the largest total seen, ``parts`` its split by kind at that moment.
    """

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
        self.parts: dict[str, int] = {}

    def sample(self) -> int:
        parents: dict[int, int] = {}
        rss: dict[int, tuple[str, int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
            except OSError:  # gone meanwhile
                continue
            pid = int(entry.name)
            parents[pid] = int(status["PPid"])
            kb = int(status.get("VmRSS", "0 kB").split()[0])
            rss[pid] = (status["Name"].strip(), kb * 1024)
        tree, total, parts = {self.pid}, 0, dict[str, int]()
        changed = True
        while changed:
            changed = False
            for pid, parent in parents.items():
                if parent in tree and pid not in tree:
                    tree.add(pid)
                    changed = True
        for pid in tree:
            name, size = rss.get(pid, ("?", 0))
            if name != "java" and not name.startswith("python"):
                # A child the JVM forks to run a command (chmod, bash) shows the JVM's whole RSS until it
                # execs, named after the forking thread: counting it would count the JVM twice.
                continue
            kind = "jvm" if name == "java" else "python"
            parts[kind] = parts.get(kind, 0) + size
            total += size
        if total > self.peak:
            self.peak, self.parts = total, parts
        return total
