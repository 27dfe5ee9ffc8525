#!/usr/bin/env python3
"""Start, stop and inspect the local stack: every service a local process on loopback.

Standard library only, so it runs before the project's virtualenv exists.
``install.sh`` puts the binaries in place (Debian packages, jars resolved by
Maven); this script owns the processes, and ``configs.py`` says what each
component is configured with:

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
import glob
import json
import os
import pwd
import shutil
import signal
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
if str(HERE) not in sys.path:  # configs.py beside this file, however this file was loaded
    sys.path.insert(0, str(HERE))
import configs  # noqa: E402
ORDER = ["postgres", "mariadb", "redis", "kafka", "elasticsearch", "connect"]


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def default_state_dir() -> Path:
    # Root's home is closed to the unprivileged user the databases run as, so
    # root keeps its state under /var/lib.
    if os.geteuid() == 0:
        return Path("/var/lib/cdcsync")
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "cdcsync"


ENV = {**read_env_file(HERE / "stack.env"), **{k: v for k, v in os.environ.items() if k in read_env_file(HERE / "stack.env")}}
STATE = Path(os.environ.get("CDCSYNC_STATE_DIR") or default_state_dir())
DATA, LOGS, RUN, CONF = STATE / "data", STATE / "logs", STATE / "run", STATE / "conf"
SERVICE_USER = os.environ.get("CDCSYNC_SERVICE_USER", "cdcsync") if os.geteuid() == 0 else None
JAVA = str(Path(os.environ["JAVA_HOME"]) / "bin/java") if os.environ.get("JAVA_HOME") else (shutil.which("java") or "java")


class StackError(Exception):
    """A component failed; the message names it and where to look."""


class ExitedError(StackError):
    """A component's process exited before it became healthy."""


# --------------------------------------------------------------------------- processes


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


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first), or [] when there is no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def zombie(pid: int) -> bool:
    """PID exited and its parent has not reaped it yet.

    After `kill -9` that lasts as long as the parent (often pid 1) takes to
    reap: seconds. The process does not run, but its pid is still taken.
    """
    return _stat(pid)[:1] in (["Z"], ["X"])


def proc_start_time(pid: int) -> str | None:
    """When PID started (clock ticks since boot), or None when no such process runs (a zombie does not)."""
    fields = _stat(pid)
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
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, env={**os.environ, **(env or {})}, cwd=cwd, **kwargs,
    )
    write_pid(name, proc.pid)
    return proc.pid


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        except (OSError, IndexError, ValueError):
            continue
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
    os.killpg(pid, signal.SIGKILL)
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


def tail(name: str, lines: int = 15) -> str:
    try:
        text = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "  (no log written)"
    return "\n".join("  | " + line for line in text)


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
    return pid if os.fsencode(DATA / "postgres") in (_argv(pid) or []) else None


def _argv(pid: int) -> list[bytes] | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


def pg_wait_gone(timeout: float = 60) -> None:
    """Wait while the postmaster postmaster.pid names has been killed but is not gone yet.

    Postgres refuses to start while that pid exists. After `kill -9` the
    process dies, then stays a zombie until its parent (often pid 1) reaps it:
    seconds. A live process of another program with the recycled pid does
    not hold Postgres back and is not waited for.
    """
    pid = pg_lock_pid()
    deadline = time.monotonic() + timeout
    while pid is not None and _stat(pid):
        argv = _argv(pid)
        if not (zombie(pid) or not argv or argv == [b""] or os.fsencode(DATA / "postgres") in argv):
            return  # another program's process
        if time.monotonic() > deadline:
            raise StackError(f"postgres: the postmaster postmaster.pid names (pid {pid}) is still there after "
                             f"{timeout:.0f}s (parent pid {(_stat(pid)[1:2] or ['?'])[0]}); Postgres will not start "
                             "while it exists")
        time.sleep(0.2)


def pg_start() -> None:
    data = DATA / "postgres"
    if not (data / "PG_VERSION").exists():
        own(data)
        pwfile = RUN / "pg.pw"
        pwfile.write_text("postgres\n")
        own(pwfile)
        done = run_as_service([pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile),
                               "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale"])
        pwfile.unlink()
        if done.returncode:
            raise StackError(f"postgres: initdb failed\n{done.stdout}{done.stderr}")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(configs.postgresql_conf(ENV, RUN))
    pg_wait_gone()
    done = run_as_service([pg_bin("pg_ctl"), "-D", str(data), "-l", str(LOGS / "postgres.log"), "-w", "-t", "60", "start"])
    if done.returncode:
        raise StackError(f"postgres failed to start; log: {LOGS / 'postgres.log'}\n{done.stdout}{done.stderr}\n{tail('postgres')}")
    psql = [pg_bin("psql"), "-h", str(RUN), "-p", ENV["PG_PORT"], "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qtA"]
    done = run_as_service([*psql, "-d", "postgres"], input=configs.postgres_provisioning(ENV))
    if done.returncode:
        raise StackError(f"postgres: provisioning role/database failed\n{done.stderr}")


def pg_stop(_pid: int) -> None:
    run_as_service([pg_bin("pg_ctl"), "-D", str(DATA / "postgres"), "-m", "fast", "-w", "-t", "60", "stop"])


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


def spawned(name: str) -> Callable[[], int | None]:
    return lambda: read_pid(name)


def stop_spawned(name: str) -> Callable[[int], None]:
    return lambda pid: terminate(name, pid)


COMPONENTS = {c.name: c for c in [
    Component("postgres", "PG_PORT", pg_start, lambda: tcp_open(int(ENV["PG_PORT"])), 60, pg_pid, pg_stop),
    Component("mariadb", "MARIADB_PORT", mariadb_start, mariadb_ready, 90, spawned("mariadb"), stop_spawned("mariadb")),
    Component("redis", "REDIS_PORT", redis_start, redis_ping, 30, spawned("redis"), stop_spawned("redis")),
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
