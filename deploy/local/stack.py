#!/usr/bin/env python3
"""Start, stop and inspect the local stack: every service a local process on loopback.

Standard library only, so it runs before the project's virtualenv exists.
``install.sh`` puts the binaries in place (Debian packages, jars resolved by
Maven); this script says how each component starts and when it is healthy,
``processes.py`` how any of them is spawned, found and stopped (Postgres,
which ``pg_ctl`` starts: ``pgserver.py``), and ``configs.py`` what each is
configured with:

    stack.py up [COMPONENT...]      start what is not running, wait until healthy
    stack.py down [COMPONENT...]    stop exactly the processes it started
    stack.py status [--json]        state, pid, port and RSS of each component
    stack.py kill COMPONENT         SIGKILL a component (chaos tests)

Everything lives under one state directory (``CDCSYNC_STATE_DIR``): data/,
logs/, run/ (pid files, sockets), conf/ (generated configs). Ports and
credentials come from ``stack.env`` beside this file. A component that does not
come up in time fails ``up`` with exit 1, naming it and the path of its log.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the modules beside this file, however this file was loaded
    sys.path.insert(0, str(HERE))
import configs  # noqa: E402
from pgserver import pg_pid, pg_start, pg_stop  # noqa: E402
from processes import (  # noqa: E402
    CONF, DATA, LOGS, RUN, SERVICE_USER, STATE, StackError, kill, own, read_pid, rss_bytes, run_as_service, spawn, tail,
    terminate,
)

ORDER = ["postgres", "mariadb", "redis", "seaweedfs", "kafka", "elasticsearch", "connect"]


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


ENV = {**read_env_file(HERE / "stack.env"), **{k: v for k, v in os.environ.items() if k in read_env_file(HERE / "stack.env")}}
JAVA = str(Path(os.environ["JAVA_HOME"]) / "bin/java") if os.environ.get("JAVA_HOME") else (shutil.which("java") or "java")


class ExitedError(StackError):
    """A component's process exited before it became healthy."""


# --------------------------------------------------------------------------- health checks


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


def redis_ping() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", int(ENV["REDIS_PORT"])), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def connect_ready() -> bool:
    base = f"http://127.0.0.1:{ENV['CONNECT_PORT']}"
    try:
        with urllib.request.urlopen(f"{base}/connector-plugins", timeout=3) as response:
            classes = {p["class"] for p in json.load(response)}
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return {"io.debezium.connector.postgresql.PostgresConnector",
            "io.debezium.connector.mariadb.MariaDbConnector"} <= classes


def wait_until(name: str, check: Callable[[], bool], timeout: float, pid_of: Callable[[], int | None]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if pid_of() is None:
            raise ExitedError(f"{name} exited during start-up; log: {LOGS / (name + '.log')}\n{tail(name)}")
        time.sleep(0.5)
    raise StackError(f"{name} did not become healthy within {timeout:.0f}s; log: {LOGS / (name + '.log')}\n{tail(name)}")


# --------------------------------------------------------------------------- components


@dataclass
class Component:
    name: str
    port_key: str
    start: Callable[[], None]
    healthy: Callable[[], bool]
    timeout: float
    pid: Callable[[], int | None]
    stop: Callable[[int], None]


def mariadb_start() -> None:
    data = DATA / "mariadb"
    if not (data / "mysql").exists():
        own(data)
        done = run_as_service(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--skip-test-db",
                               "--auth-root-authentication-method=normal"]
                              + ([f"--user={SERVICE_USER}"] if SERVICE_USER else []))
        if done.returncode:
            raise StackError(f"mariadb: mariadb-install-db failed\n{done.stdout}{done.stderr}")
    spawn("mariadb", [shutil.which("mariadbd") or "/usr/sbin/mariadbd", *configs.mariadb_flags(ENV, data, RUN)])


def mariadb_sql(sql: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mariadb", "--no-defaults", f"--socket={RUN / 'mariadb.sock'}", "-uroot", "-e", sql],
                          capture_output=True, text=True, check=False)


def mariadb_ready() -> bool:
    if mariadb_sql("SELECT 1").returncode:
        return False
    done = mariadb_sql(configs.mariadb_provisioning(ENV))
    if done.returncode:
        raise StackError(f"mariadb: provisioning user failed: {done.stderr.strip()}")
    return True


def redis_start() -> None:
    own(DATA / "redis")
    spawn("redis", [shutil.which("redis-server") or "/usr/bin/redis-server", *configs.redis_flags(ENV, DATA / "redis")])


def java_cmd(lib: str, heap: str, main: str, *args: str) -> list[str]:
    jars = STATE / "lib" / lib
    if not any(jars.glob("*.jar")):
        raise StackError(f"{lib}: no jars in {jars}; run deploy/local/install.sh")
    log4j = CONF / "log4j2.properties"
    log4j.write_text(configs.log4j_properties())
    return [JAVA, *configs.java_flags(heap, log4j), "-cp", f"{jars}/*", main, *args]


def kafka_start() -> None:
    data, conf = DATA / "kafka", CONF / "kafka.properties"
    conf.write_text(configs.kafka_properties(ENV, data))
    own(data)
    if not (data / "meta.properties").exists():
        cluster_id = configs.kafka_cluster_id(uuid.uuid4().bytes)
        done = run_as_service(java_cmd("kafka", "256m", "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf)))
        if done.returncode:
            raise StackError(f"kafka: formatting storage failed\n{done.stdout}{done.stderr}")
    spawn("kafka", java_cmd("kafka", ENV["KAFKA_HEAP"], "kafka.Kafka", str(conf)))


def connect_secrets_dir() -> Path:
    """Where cdcsync writes connector secrets (its default connect.secrets_dir): the Connect user's, 0700."""
    return STATE / "connect-secrets"


def connect_start() -> None:
    secrets = connect_secrets_dir()
    own(secrets)
    secrets.chmod(0o700)
    conf = CONF / "connect.properties"
    conf.write_text(configs.connect_properties(ENV, STATE / "plugins", secrets))
    spawn("connect", java_cmd("connect", ENV["CONNECT_HEAP"], "org.apache.kafka.connect.cli.ConnectDistributed", str(conf)))


def es_home() -> Path:
    homes = sorted((STATE / "opt").glob("elasticsearch-*"))
    if not homes:
        raise StackError(f"elasticsearch: not unpacked under {STATE / 'opt'}; run deploy/local/install.sh")
    return homes[-1]


def es_start() -> None:
    home, conf = es_home(), CONF / "elasticsearch"
    if not conf.exists():
        shutil.copytree(home / "config", conf)
    (conf / "jvm.options").write_text(configs.es_jvm_options())
    own(conf, DATA / "elasticsearch")
    heap = ENV["ES_HEAP"]
    java_home = os.environ.get("JAVA_HOME") or str(Path(os.path.realpath(JAVA)).parent.parent)
    spawn("elasticsearch", [str(home / "bin/elasticsearch"), *configs.es_settings(ENV, DATA / "elasticsearch", LOGS / "elasticsearch")],
          env={"ES_JAVA_HOME": java_home, "ES_PATH_CONF": str(conf), "ES_JAVA_OPTS": f"-Xms{heap} -Xmx{heap}"}, cwd=home)


def es_healthy() -> bool:
    return http_ok(f"http://127.0.0.1:{ENV['ES_PORT']}/_cluster/health?wait_for_status=yellow&timeout=1s")


def weed_binary() -> Path:
    weed = STATE / "opt" / f"seaweedfs-{ENV['SEAWEEDFS_MODULE']}" / "weed"
    if not os.access(weed, os.X_OK):
        raise StackError(f"seaweedfs: no {weed}; run deploy/local/install.sh")
    return weed


def seaweedfs_start() -> None:
    data = DATA / "seaweedfs"
    own(data)
    # Logs to stderr only (the component's log), not to files of its own in /tmp.
    spawn("seaweedfs", [str(weed_binary()), "-logtostderr", "mini", *configs.seaweedfs_flags(ENV, data, RUN)],
          env=configs.seaweedfs_environment(ENV))  # fmt: skip


def seaweedfs_ready() -> bool:
    """The S3 gateway answers and the bucket exists (the filer holds each bucket as a directory of /buckets)."""
    return http_ok(f"http://127.0.0.1:{ENV['S3_PORT']}/healthz") and http_ok(
        f"http://127.0.0.1:{ENV['SEAWEEDFS_FILER_PORT']}/buckets/{ENV['S3_BUCKET']}/"
    )


def spawned(name: str) -> Callable[[], int | None]:
    return lambda: read_pid(name)


def stop_spawned(name: str) -> Callable[[int], None]:
    return lambda pid: terminate(name, pid)


COMPONENTS = {c.name: c for c in [
    Component("postgres", "PG_PORT", lambda: pg_start(ENV), lambda: tcp_open(int(ENV["PG_PORT"])), 60, pg_pid, pg_stop),
    Component("mariadb", "MARIADB_PORT", mariadb_start, mariadb_ready, 90, spawned("mariadb"), stop_spawned("mariadb")),
    Component("redis", "REDIS_PORT", redis_start, redis_ping, 30, spawned("redis"), stop_spawned("redis")),
    Component("seaweedfs", "S3_PORT", seaweedfs_start, seaweedfs_ready, 60, spawned("seaweedfs"), stop_spawned("seaweedfs")),
    Component("kafka", "KAFKA_PORT", kafka_start, lambda: tcp_open(int(ENV["KAFKA_PORT"])), 90, spawned("kafka"), stop_spawned("kafka")),
    Component("elasticsearch", "ES_PORT", es_start, es_healthy, 180, spawned("elasticsearch"), stop_spawned("elasticsearch")),
    Component("connect", "CONNECT_PORT", connect_start, connect_ready, 180, spawned("connect"), stop_spawned("connect")),
]}


# --------------------------------------------------------------------------- commands


def up(names: list[str]) -> None:
    for path in (DATA, LOGS, RUN, CONF):
        path.mkdir(parents=True, exist_ok=True)
    own(LOGS, RUN)
    pending: list[tuple[Component, bool]] = []  # (component, whether this call started it)
    for name in names:
        comp = COMPONENTS[name]
        if name == "connect":  # Connect needs the broker before it can start.
            for waiting, started in pending:
                wait_healthy(waiting, started)
            pending = []
        if comp.pid() is not None:
            if comp.healthy():
                print(f"  {name:<14} already running (pid {comp.pid()})", flush=True)
                continue
            pending.append((comp, False))  # still starting, or dying after a kill
            continue
        print(f"  {name:<14} starting ...", flush=True)
        comp.start()
        pending.append((comp, True))
    for comp, started in pending:
        wait_healthy(comp, started)


def wait_healthy(comp: Component, started: bool) -> None:
    """Wait until COMP is healthy. A process found running but not healthy that then exits is started again."""
    try:
        wait_until(comp.name, comp.healthy, comp.timeout, comp.pid)
    except ExitedError:
        if started:
            raise
        print(f"  {comp.name:<14} the process found exited; starting ...", flush=True)
        comp.start()
        wait_until(comp.name, comp.healthy, comp.timeout, comp.pid)
    print(f"  {comp.name:<14} up (port {ENV[comp.port_key]})", flush=True)


def down(names: list[str]) -> None:
    for name in reversed(names):
        comp = COMPONENTS[name]
        pid = comp.pid()
        if pid is None:
            print(f"  {name:<14} not running")
            continue
        print(f"  {name:<14} stopping (pid {pid})", flush=True)
        comp.stop(pid)


def status(as_json: bool) -> int:
    report = {}
    for name, comp in COMPONENTS.items():
        pid = comp.pid()
        report[name] = {
            "running": pid is not None, "healthy": pid is not None and comp.healthy(), "pid": pid,
            "port": int(ENV[comp.port_key]), "rss_bytes": rss_bytes(pid) if pid else 0,
            "log": str(LOGS / f"{name}.log"),
        }
    total = sum(c["rss_bytes"] for c in report.values())
    if as_json:
        print(json.dumps({"state_dir": str(STATE), "components": report, "total_rss_bytes": total}, indent=2))
    else:
        print(f"state directory: {STATE}")
        for name, c in report.items():
            state = "healthy" if c["healthy"] else ("running, not healthy" if c["running"] else "stopped")
            print(f"  {name:<14} {state:<22} port {c['port']:<6} pid {c['pid'] or '-':<8} rss {c['rss_bytes'] / 2**20:7.0f} MiB")
        print(f"  {'total':<14} {'':<22} {'':<11} {'':<12} rss {total / 2**20:7.0f} MiB")
    return 0 if all(c["healthy"] for c in report.values()) else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Exit codes: 0 ok, 1 a component failed, 2 usage, 3 status: not all healthy.")
    parser.add_argument("command", choices=["up", "down", "status", "kill"])
    parser.add_argument("components", nargs="*", choices=[[], *ORDER], metavar="COMPONENT", help=", ".join(ORDER))
    parser.add_argument("--json", action="store_true", help="status as JSON")
    args = parser.parse_args(argv)
    names = [n for n in ORDER if not args.components or n in args.components]
    try:
        if args.command == "up":
            up(names)
        elif args.command == "down":
            down(names)
        elif args.command == "kill":
            for name in args.components:
                pid = COMPONENTS[name].pid()
                if pid:
                    kill(name, pid)
        else:
            return status(args.json)
    except StackError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
