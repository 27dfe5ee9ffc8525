"""A planted secret never leaves cdcsync: not in any output, log or error, nor in clear in Connect's REST API.

One unique secret is the password of a real Postgres role and a real MariaDB
user created for the test, the password inside an Elasticsearch URL (the local
Elasticsearch has no auth and ignores the credentials) and of a throwaway
redis-server started with ``requirepass``, and the value of a secret-looking
``debezium:`` property. The commands then run as a user runs them
(subprocesses), and every stdout, stderr and log file is searched for it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from cdcsync.config import Config
from cdcsync.config.file import load_config
from cdcsync.connectors.apply import client_for
from cdcsync.connectors.topics import delete_topics, topic_specs
from tests.support import ENV, maria_admin, pg_admin, read_topic, stack, uid, wait_streaming

ES = f"127.0.0.1:{ENV['ES_PORT']}"


@dataclass
class Scenario:
    secret: str
    path: Path  # the config file
    tmp: Path
    config: Config
    tables: dict[str, str]  # source kind -> namespace.table
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (what, text) to search

    def cli(self, *args: str, config: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "cdcsync", "--config", str(config or self.path), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "CDCSYNC_METRICS_PORT": "0"},
        )
        self.outputs.append((f"{' '.join(args)} stdout", done.stdout))
        self.outputs.append((f"{' '.join(args)} stderr", done.stderr))
        return done

    def assert_never_shown(self) -> None:
        leaks = [what for what, text in self.outputs if self.secret in text]
        assert not leaks, f"the planted secret appears in: {', '.join(leaks)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(tmp: Path, secret: str) -> tuple[subprocess.Popen[bytes], int]:
    # requirepass from a 0600 file, not the command line (ps would show it).
    conf = tmp / "redis.conf"
    conf.touch(mode=0o600)
    port = free_port()
    conf.write_text(f'port {port}\nbind 127.0.0.1\ndir {tmp}\nsave ""\nrequirepass {secret}\n')
    server = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server, port
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise AssertionError(f"redis-server did not listen on {port}")


def config_dict(name: str, user: str, secret: str, tables: dict[str, str], redis_port: int) -> dict[str, Any]:
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}", "timeout_s": 10},
        "sources": [
            {
                "name": f"{name}_pg",
                "kind": "postgres",
                "port": int(ENV["PG_PORT"]),
                "database": ENV["PG_DATABASE"],
                "user": user,
                "password": secret,
                "tables": [tables["postgres"]],
                "heartbeat_interval_ms": 500,
                "debezium": {"database.sslpassword": secret},  # read only with a client key: harmless here
            },
            {
                "name": f"{name}_maria",
                "kind": "mariadb",
                "port": int(ENV["MARIADB_PORT"]),
                "database": ENV["MARIADB_DATABASE"],
                "user": user,
                "password": secret,
                "tables": [tables["mariadb"]],
                "heartbeat_interval_ms": 500,
            },
        ],
        "followers": [
            {
                "name": f"{name}_es",
                "kind": "elasticsearch",
                "url": f"http://cdcsync:{secret}@{ES}",
                "prefix": f"{name}_",
            },
            {"name": f"{name}_redis", "kind": "redis", "url": f"redis://:{secret}@127.0.0.1:{redis_port}/0"},
        ],
    }


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    name = f"sec{uid()}"
    user = name
    tmp = tmp_path_factory.mktemp("secrets")
    tables = {"postgres": f"public.{name}", "mariadb": f"inventory.{name}_m"}  # targets must differ
    with pg_admin() as pg:
        pg.execute(f"CREATE ROLE {user} LOGIN REPLICATION PASSWORD '{secret}'")
        pg.execute(f"GRANT CREATE ON DATABASE {ENV['PG_DATABASE']} TO {user}")  # its publication
        pg.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        pg.execute(f"ALTER TABLE {name} OWNER TO {user}")
    maria = maria_admin()
    with maria, maria.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{secret}'")
        grants = "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, LOCK TABLES"
        cur.execute(f"GRANT {grants} ON *.* TO '{user}'@'%'")
        cur.execute(f"CREATE TABLE inventory.{name}_m (id int PRIMARY KEY, v text)")
        # As the stack's user: without a grant on the database, information_schema.table_constraints shows
        # the user no key and the pre-flight reports the table keyless (even with ALL on the table itself).
        cur.execute(f"GRANT ALL PRIVILEGES ON inventory.* TO '{user}'@'%'")
    redis_server, redis_port = start_redis(tmp, secret)
    path = tmp / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(config_dict(name, user, secret, tables, redis_port)))
    config = load_config(path, env={})
    found = Scenario(secret, path, tmp, config, tables)
    try:
        yield found
    finally:
        _clean(config, name, user)
        redis_server.kill()
        redis_server.wait()


def _clean(config: Config, name: str, user: str) -> None:
    client = client_for(config)
    for source in config.sources:
        client.delete(source.name)
    with pg_admin() as pg:
        slot = config.sources[0].slot
        for _ in range(60):  # the slot stays active until the task has stopped
            row = pg.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row is None:
                break
            if not row[0]:
                pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                break
            time.sleep(0.5)
        pg.execute(f"DROP PUBLICATION IF EXISTS {config.sources[0].publication}")
        pg.execute(f"DROP TABLE IF EXISTS {name}")
        pg.execute(f"REVOKE CREATE ON DATABASE {ENV['PG_DATABASE']} FROM {user}")
        pg.execute(f"DROP ROLE IF EXISTS {user}")
    maria = maria_admin()
    with maria, maria.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS inventory.{name}_m")
        cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
    for source in config.sources:
        delete_topics(config, [t.name for t in topic_specs(source)])
    delete_topics(config, [f.dlq_topic for f in config.followers])
    requests.delete(f"http://{ES}/{name}_*", timeout=30)
    state = Path(config.state_dir) if config.state_dir else stack.STATE
    for follower in config.followers:
        shutil.rmtree(state / "checkpoints" / follower.name, ignore_errors=True)
        for leftover in (state / "bootstrap" / f"{follower.name}.json", state / "secrets" / f"{follower.name}.json"):
            leftover.unlink(missing_ok=True)
    for source in config.sources:
        (stack.STATE / "connect-secrets" / f"{source.name}.properties").unlink(missing_ok=True)


def connect_log_size() -> int:
    log = stack.LOGS / "connect.log"
    return log.stat().st_size if log.exists() else 0


def test_planted_secret_appears_in_no_output_and_not_in_clear_at_connect(scenario: Scenario) -> None:
    s = scenario
    connect_log_from = connect_log_size()
    pg_source, maria_source = s.config.sources
    es, cache = s.config.followers

    applied = s.cli("connectors", "apply", "--json")
    assert applied.returncode == 0, applied.stderr
    wait_streaming(s.config)
    states = s.cli("connectors", "status", "--json")
    assert states.returncode == 0, states.stderr

    # Connect serves the config without the password in clear (a reference), and capture works with it.
    references = []
    for source in s.config.sources:
        served = client_for(s.config).get_config(source.name)
        assert served is not None
        s.outputs.append((f"GET /connectors/{source.name}/config", json.dumps(served)))
        references.append(served["database.password"])
    assert json.loads(applied.stdout)[0]["action"] in ("created", "updated")
    again = s.cli("connectors", "apply", "--json")
    assert again.returncode == 0, again.stderr
    assert {r["action"] for r in json.loads(again.stdout)} == {"unchanged"}, again.stdout

    with pg_admin() as pg:
        pg.execute(f"INSERT INTO {s.tables['postgres']} VALUES (1, 'one'), (2, 'two')")
    maria = maria_admin()
    with maria, maria.cursor() as cur:
        cur.execute(f"INSERT INTO {s.tables['mariadb']} VALUES (1, 'one')")
    pg_topic = pg_source.topic(pg_source.tables[0])
    maria_topic = maria_source.topic(maria_source.tables[0])
    assert len(read_topic(pg_topic, lambda records: len(records) >= 2)) >= 2
    assert read_topic(maria_topic, lambda records: len(records) >= 1)

    boot = s.cli("bootstrap", cache.name, "--json")
    assert boot.returncode == 0, boot.stderr
    run_log = s.tmp / "run.log"
    ran = s.cli("run", "--once", es.name, cache.name)
    run_log.write_text(ran.stdout + ran.stderr)
    s.outputs.append(("run --once log", run_log.read_text()))
    assert ran.returncode == 0, ran.stderr[-3000:]
    checked = s.cli("verify", es.name, cache.name, "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    assert all(r["source_rows"] == r["store_rows"] for r in json.loads(checked.stdout)), checked.stdout

    # A config error beside the secret (a misspelt key holding it), and connection errors to wrong ports.
    raw = yaml.safe_load(s.path.read_text())
    misspelt = json.loads(json.dumps(raw))
    misspelt["sources"][0]["pasword"] = misspelt["sources"][0].pop("password")
    bad_config = s.tmp / "misspelt.yaml"
    bad_config.write_text(yaml.safe_dump(misspelt))
    assert s.cli("connectors", "status", config=bad_config).returncode == 2
    bad_url = json.loads(json.dumps(raw))
    bad_url["followers"][1]["url"] = f"redis://:{s.secret}@127.0.0.1:notaport/0"
    bad_url_config = s.tmp / "bad-url.yaml"
    bad_url_config.write_text(yaml.safe_dump(bad_url))
    s.cli("verify", cache.name, config=bad_url_config)  # refused at load (new) or at connect (old): never shown
    closed = free_port()
    wrong = json.loads(json.dumps(raw))
    wrong["followers"][0]["url"] = f"http://cdcsync:{s.secret}@127.0.0.1:{closed}"
    wrong["followers"][1]["url"] = f"redis://:{s.secret}@127.0.0.1:{closed}/0"
    wrong["sources"][0]["port"] = closed
    wrong_config = s.tmp / "wrong-port.yaml"
    wrong_config.write_text(yaml.safe_dump(wrong))
    assert s.cli("verify", es.name, "--json", config=wrong_config).returncode != 0
    assert s.cli("verify", cache.name, "--json", config=wrong_config).returncode != 0
    assert s.cli("connectors", "apply", pg_source.name, "--json", config=wrong_config).returncode != 0

    with (stack.LOGS / "connect.log").open(errors="replace") as log:
        log.seek(connect_log_from)
        s.outputs.append(("Kafka Connect's log", log.read()))
    s.assert_never_shown()
    assert all(ref.startswith("${file:") for ref in references), references
