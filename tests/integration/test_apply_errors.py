"""`connectors apply` refuses bad input with a message naming the fault, and registers nothing half-way."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcsync.connectors.apply import apply, client_for
from cdcsync.errors import PreflightError
from tests.support import (
    ENV,
    captured,
    config_for,
    drop_capture,
    execute,
    maria_admin,
    pg_admin,
    pg_connect,
    source_dict,
    uid,
)


def run_cli(
    tmp_path: Path, sources: list[dict[str, Any]], *args: str, connect_url: str | None = None
) -> subprocess.CompletedProcess:
    cfg = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": connect_url or f"http://127.0.0.1:{ENV['CONNECT_PORT']}", "timeout_s": 3},
        "sources": sources,
    }
    path = tmp_path / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run(
        [sys.executable, "-m", "cdcsync", "--config", str(path), "connectors", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def registered(name: str) -> bool:
    return client_for(config_for()).get_config(name) is not None


def test_unknown_table_fails_naming_it_and_registers_nothing(tmp_path: Path) -> None:
    table = f"ok_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY)")
    good = source_dict("postgres", f"good{uid()}", [f"public.{table}"])
    bad = source_dict("mariadb", f"bad{uid()}", [f"inventory.no_such_table_{uid()}"])
    try:
        done = run_cli(tmp_path, [good, bad], "apply")
        assert done.returncode == 1, done.stderr
        assert f"unknown table {bad['tables'][0]}" in done.stderr
        assert not registered(good["name"]) and not registered(bad["name"])
    finally:
        execute("postgres", f"DROP TABLE {table}")


def test_malformed_debezium_property_fails_naming_the_field(tmp_path: Path) -> None:
    table = f"ok_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY)")
    source = source_dict("postgres", f"malformed{uid()}", [f"public.{table}"], debezium={"snapshot.mode": "sometimes"})
    try:
        done = run_cli(tmp_path, [source], "apply")
        assert done.returncode == 2, done.stderr
        assert f"connector {source['name']}: snapshot.mode" in done.stderr
        assert not registered(source["name"])
    finally:
        execute("postgres", f"DROP TABLE {table}")


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("kind", "oracle", "sources[0].kind: Input should be 'postgres' or 'mariadb'"),
        ("port", 99999, "sources[0].port: Input should be less than or equal to 65535"),
        ("tables", ["a.b.c"], "sources[0].tables"),
    ],
)
def test_invalid_config_exits_2_naming_the_field(tmp_path: Path, field: str, value: Any, message: str) -> None:
    secret = f"pw-{uid()}-secret"
    source = {**source_dict("postgres", f"cfg{uid()}", ["public.x"]), "password": secret, field: value}
    done = run_cli(tmp_path, [source], "apply")
    assert done.returncode == 2
    assert message in done.stderr
    assert "cdcsync.yaml" in done.stderr  # where the value came from
    assert secret not in done.stderr


def test_connect_unreachable_names_the_url(tmp_path: Path) -> None:
    source = source_dict("postgres", f"unreach{uid()}", ["public.x"])
    done = run_cli(tmp_path, [source], "apply", connect_url="http://127.0.0.1:1")
    assert done.returncode == 1
    assert "Kafka Connect unreachable at http://127.0.0.1:1" in done.stderr


def test_missing_replication_privilege_is_reported_with_the_fix() -> None:
    user, table = f"norepl{uid()}", f"priv_{uid()}"
    with pg_connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
    admin = pg_admin()
    admin.execute(f"CREATE ROLE {user} LOGIN PASSWORD 'pw'")
    conn = maria_admin()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE inventory.{table} (id int PRIMARY KEY)")
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON inventory.* TO '{user}'@'%'")
    try:
        config = config_for(
            {**source_dict("postgres", f"p{uid()}", [f"public.{table}"]), "user": user, "password": "pw"},
            {**source_dict("mariadb", f"m{uid()}", [f"inventory.{table}"]), "user": user, "password": "pw"},
        )
        with pytest.raises(PreflightError) as err:
            apply(config)
        text = str(err.value)
        assert f"role {user} lacks REPLICATION; run ALTER ROLE {user} REPLICATION" in text
        assert f"{user} lacks REPLICATION SLAVE" in text
        assert all(not registered(s.name) for s in config.sources)
    finally:
        admin.execute(f"DROP TABLE {table}")
        admin.execute(f"DROP ROLE {user}")
        admin.close()
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE inventory.{table}")
            cur.execute(f"DROP USER '{user}'@'%'")
        conn.close()


def test_binlog_row_image_not_full_is_reported() -> None:
    table = f"img_{uid()}"
    execute("mariadb", f"CREATE TABLE {table} (id int PRIMARY KEY)")
    # Root is needed to change a global; the test restores it at once.
    root = maria_admin()
    root.cursor().execute("SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        config = config_for(source_dict("mariadb", f"img{uid()}", [f"inventory.{table}"]))
        with pytest.raises(PreflightError, match="binlog_row_image is MINIMAL; set binlog_row_image = FULL"):
            apply(config)
    finally:
        root.cursor().execute("SET GLOBAL binlog_row_image = 'FULL'")
        root.close()
        execute("mariadb", f"DROP TABLE {table}")


def test_applying_twice_changes_nothing_then_reports_the_changed_keys() -> None:
    table = f"idem_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY)")
    config = config_for(source_dict("postgres", f"idem{uid()}", [f"public.{table}"]))
    try:
        assert [r.action for r in apply(config)] == ["created"]
        assert [r.action for r in apply(config)] == ["unchanged"]
        changed = config_for(
            source_dict("postgres", config.sources[0].name, [f"public.{table}"], heartbeat_interval_ms=750)
        )
        result = apply(changed)[0]
        assert (result.action, result.changed_keys) == ("updated", ["heartbeat.interval.ms"])
    finally:
        drop_capture(config)
        execute("postgres", f"DROP TABLE {table}")


def test_gtid_strict_mode_off_is_refused_with_the_fix_and_registers_nothing(tmp_path: Path) -> None:
    table = f"gtid_{uid()}"
    execute("mariadb", f"CREATE TABLE {table} (id int PRIMARY KEY)")
    source = source_dict("mariadb", f"gtid{uid()}", [f"inventory.{table}"])
    root = maria_admin()
    root.cursor().execute("SET GLOBAL gtid_strict_mode = OFF")  # restored at once below
    try:
        done = run_cli(tmp_path, [source], "apply")
        assert done.returncode == 1, done.stderr
        assert "gtid_strict_mode is OFF" in done.stderr and "SET GLOBAL gtid_strict_mode = ON" in done.stderr
        assert not registered(source["name"])
    finally:
        root.cursor().execute("SET GLOBAL gtid_strict_mode = ON")
        root.close()
        execute("mariadb", f"DROP TABLE {table}")


def test_kind_mysql_is_refused_at_config_load_before_anything_is_registered(tmp_path: Path) -> None:
    source = {**source_dict("mariadb", f"my{uid()}", ["inventory.anything"]), "kind": "mysql"}
    done = run_cli(tmp_path, [source], "apply")
    assert done.returncode == 2, done.stderr
    assert "sources[0].kind: Value error, kind mysql is not supported yet" in done.stderr
    assert "kind: mariadb" in done.stderr
    assert not registered(source["name"])


def test_a_database_behind_what_capture_read_is_refused_and_reported_with_the_repair() -> None:
    """What a restore from a backup looks like to cdcsync: Connect's committed LSN beyond the database's WAL.

    The committed offset is moved ahead through Connect's own offsets API (a real restore cannot be staged on
    a shared server); the check sees exactly what it would see after one.
    """
    from cdcsync.connectors.watch import CaptureWatch

    table = f"restore_{uid()}"
    with captured("postgres", [f"CREATE TABLE {table} (id INT PRIMARY KEY)"], [f"public.{table}"]) as config:
        execute("postgres", f"INSERT INTO {table} VALUES (1)")
        client = client_for(config)
        name = config.sources[0].name
        client._call("PUT", f"/connectors/{name}/stop")
        deadline = time.monotonic() + 60
        while (client.status(name) or {}).get("connector", {}).get("state") != "STOPPED":
            assert time.monotonic() < deadline, client.status(name)
            time.sleep(0.5)
        [offset] = client.offsets(name)
        ahead = {**offset["offset"], "lsn": int(offset["offset"]["lsn"]) + 10**12}
        client._call("PATCH", f"/connectors/{name}/offsets", {"offsets": [{**offset, "offset": ahead}]})
        with pytest.raises(PreflightError, match=rf"source {name} went back in time: its WAL position \d+ is behind"):
            apply(config)
        watch = CaptureWatch(config)
        watch.tick()
        ok, problems = watch.health()
        assert not ok and any("went back in time" in p and "After a restore" in p for p in problems), problems
