"""Table patterns on the real stack: a table created while the daemon runs, matching a source's `include`, is
captured (an incremental snapshot of its rows) and followed by every follower, with no restart; `exclude` keeps
another out."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from cdcsync.connectors.apply import apply
from cdcsync.connectors.discover import resolve
from tests.chaos.daemon import (
    daemon_config,
    free_port,
    running_daemon,
    stop_daemon,
    verify_until_clean,
    wait_for_batches,
)
from tests.integration.followers import drop_stores, follower_dicts
from tests.support import ENV, drop_capture, execute, source_dict, uid, wait_streaming

FOLLOWERS = ("search", "cache", "warehouse")
KINDS = ["postgres", pytest.param("mariadb", marks=pytest.mark.long)]


def wait_for_line(log: Path, text: str, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while text not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"no {text!r} within {within_s} s:\n" + log.read_text()[-4000:]
        time.sleep(2)


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_created_later_that_matches_is_captured_and_followed_without_a_restart(
    tmp_path: Path, kind: str
) -> None:
    tag, prefix = f"t{uid()}", f"pat_{uid()}"
    first, later, skipped = f"{prefix}_a", f"{prefix}_Late", f"{prefix}_skip"
    pg = kind == "postgres"
    ns, q = ("public", '"') if pg else ("inventory", "`")
    numbers = "generate_series(1, {}) AS g(n)" if pg else "(SELECT seq AS n FROM seq_1_to_{}) g"
    execute(
        kind,
        f"CREATE TABLE {first} (id INT PRIMARY KEY, v TEXT NOT NULL)",
        f"INSERT INTO {first} SELECT n, CONCAT('a', n) FROM {numbers.format(50)}",
    )
    name = f"{tag}_{kind[:2]}"
    source = source_dict(kind, name, [], include=[rf"{ns}\.{prefix}_.*"], exclude=[rf".*\.{prefix}_skip"])
    _, config_path, config = daemon_config(tmp_path, [source], follower_dicts(tag, tmp_path))
    at_start = resolve(config)
    assert [str(t) for t in at_start.sources[0].tables] == [f"{ns}.{first}"]
    log, everything = tmp_path / "run.log", at_start
    try:
        apply(at_start)
        wait_streaming(at_start)
        with running_daemon(config_path, log, free_port()) as daemon:
            wait_for_batches(log, FOLLOWERS)

            # Created while the daemon runs: a quoted mixed-case name, a composite key, rows in it before capture
            # knows it, and changes while its snapshot runs; the excluded table alike.
            execute(
                kind,
                f"CREATE TABLE {q}{later}{q} (region VARCHAR(8), n INT, body TEXT NOT NULL, PRIMARY KEY (region, n))",
                f"INSERT INTO {q}{later}{q} SELECT CONCAT('r', n % 3), n, REPEAT(MD5(CONCAT('', n)), 1 + n % 7) "
                f"FROM {numbers.format(400)}",
                f"CREATE TABLE {skipped} (id INT PRIMARY KEY)",
                f"INSERT INTO {skipped} VALUES (1), (2)",
            )
            stop = threading.Event()

            def write() -> None:
                i = 0
                while not stop.is_set() and i < 200:
                    i += 1
                    execute(
                        kind,
                        f"UPDATE {q}{later}{q} SET body = CONCAT(body, '+') WHERE n = {i * 3 % 400 + 1}",
                        f"DELETE FROM {q}{later}{q} WHERE n = {i * 7 % 400 + 1} AND n % 4 = 0",
                        f"INSERT INTO {q}{later}{q} VALUES ('new', {1000 + i}, 'i{i}')",
                        f"UPDATE {first} SET v = CONCAT(v, '.') WHERE id = {i % 50 + 1}",
                    )
                    time.sleep(0.05)

            writer = threading.Thread(target=write)
            writer.start()
            try:
                wait_for_line(log, "now capturing and following tables created since the start", within_s=120)
            finally:
                stop.set()
                writer.join()
            everything = resolve(config)

            done = verify_until_clean(config_path, within_s=300)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log.read_text()[-3000:]
            reports = json.loads(done.stdout)
            for follower in FOLLOWERS:  # every follower holds the new table, equal to the source
                rows = [r for r in reports if r["follower"] == follower and r["table"] == f"{name}.{ns}.{later}"]
                assert rows and rows[0]["clean"] and rows[0]["source_rows"] >= 400, reports
            assert not any(r["table"].endswith(skipped) for r in reports) and len(reports) == 2 * len(FOLLOWERS)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"})
            topics = admin.list_topics(timeout=10).topics
            assert f"{name}.{ns}.{later}" in topics and f"{name}.{ns}.{skipped}" not in topics
            text = log.read_text(errors="replace")
            assert "state=restarting" not in text, text[-3000:]  # relaunched to follow it, never failed
            assert all(f"follower={f} relaunch: now following" in text for f in FOLLOWERS), text[-3000:]
            stop_daemon(daemon, log)
    finally:
        drop_capture(everything)
        drop_stores(config, tag)
        execute(kind, *(f"DROP TABLE IF EXISTS {q}{t}{q}" for t in (first, later, skipped)))
