"""Followers end to end: source -> Debezium -> Kafka -> Spark -> Elasticsearch, Redis, Delta; then `verify`.

Every test ends by comparing each store with the source row by row.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.followers import scenario
from tests.support import ENV, end_offset, execute, pg_connect, read_topic, uid

TARGETS = ("search", "cache", "warehouse")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-tests")
    yield session
    session.stop()


def simple(kind: str, name: str) -> str:
    text = "text" if kind == "postgres" else "VARCHAR(100)"
    return f"CREATE TABLE {name} (id INT PRIMARY KEY, name {text} NOT NULL, qty INT NOT NULL)"


def test_interleaved_transactions_and_pk_update_converge_in_every_sink(spark: Any, tmp_path: Path) -> None:
    t = f"orders_{uid()}"
    ddl = {
        "postgres": [simple("postgres", t), f"INSERT INTO {t} SELECT g, 'row ' || g, g FROM generate_series(1, 5) g"]
    }
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
        # A writes first (smaller LSNs) and commits last; B commits in between.
        a = pg_connect(autocommit=False)
        a.execute(f"UPDATE {t} SET qty = 100 WHERE id = 1")
        a.execute(f"INSERT INTO {t} VALUES (6, 'from A', 6)")
        execute("postgres", f"UPDATE {t} SET qty = 200 WHERE id = 2", f"UPDATE {t} SET qty = 201 WHERE id = 2")
        a.execute(f"UPDATE {t} SET qty = 101 WHERE id = 1")
        a.commit()
        a.close()
        sc.run_once()
        sc.assert_converged()
        # Primary-key update: old key gone, new key present, in all three sinks.
        execute("postgres", f"UPDATE {t} SET id = 50, qty = 51 WHERE id = 3")
        sc.run_once()
        sc.assert_converged()
        for follower in TARGETS:
            held = sc.held(follower, t)
            assert "3" not in held and "50" in held, follower
            assert held["1"][0] > held["2"][0], "A committed after B, so its version must be higher"


def test_redelivery_applies_nothing_twice_and_regresses_nothing(spark: Any, tmp_path: Path) -> None:
    t = f"redeliver_{uid()}"
    ddl = {"mariadb": [simple("mariadb", t)]}
    with scenario(spark, tmp_path, {"mariadb": [f"inventory.{t}"]}, ddl) as sc:
        for i in range(1, 41):
            execute("mariadb", f"INSERT INTO {t} VALUES ({i}, 'v1', {i})")
        for i in range(1, 41, 2):
            execute("mariadb", f"UPDATE {t} SET name = 'v2' WHERE id = {i}")
        execute("mariadb", f"DELETE FROM {t} WHERE id > 35")
        sc.run_once()
        sc.assert_converged()
        before = {f: sc.held(f, t) for f in TARGETS}
        # Rewind every follower to the start of the log: a fresh checkpoint replays everything.
        for cfg in sc.config.followers:
            import shutil

            shutil.rmtree(cfg.checkpoint_dir or "", ignore_errors=True)
        sc.followers.clear()
        sc.run_once()
        sc.assert_converged()
        after = {f: sc.held(f, t) for f in TARGETS}
        assert after == before


def test_an_older_change_arriving_late_never_overwrites_a_newer_one(spark: Any, tmp_path: Path) -> None:
    t = f"late_{uid()}"
    ddl = {"postgres": [simple("postgres", t)]}
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
        execute("postgres", f"INSERT INTO {t} VALUES (1, 'old', 1)")
        execute("postgres", f"UPDATE {t} SET name = 'new', qty = 2 WHERE id = 1")
        execute("postgres", f"INSERT INTO {t} VALUES (2, 'doomed', 1)")
        execute("postgres", f"DELETE FROM {t} WHERE id = 2")
        source = sc.config.sources[0]
        topic = source.topic(source.tables[0])
        records = read_topic(topic, lambda rs: len(rs) >= 5)
        sc.run_once()
        # Re-send the first insert of each row after everything else: late, older, redelivered.
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"})
        for r in records:
            if r.op == "c":
                producer.produce(topic, key=json.dumps(r.key), value=json.dumps(r.value))
        producer.flush(30)
        sc.run_once()
        sc.assert_converged()
        for follower in TARGETS:
            held = sc.held(follower, t)
            assert set(held) == {"1"}, follower  # the deleted row did not come back
            assert held["1"][1]["name"] == "new", follower


def test_a_malformed_record_is_dead_lettered_and_everything_else_converges(spark: Any, tmp_path: Path) -> None:
    t = f"poison_{uid()}"
    ddl = {"postgres": [simple("postgres", t)]}
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
        source = sc.config.sources[0]
        topic = source.topic(source.tables[0])
        execute("postgres", f"INSERT INTO {t} VALUES (1, 'a', 1)")
        read_topic(topic, lambda rs: len(rs) >= 1)
        poison_offset = end_offset(topic)
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"})
        producer.produce(topic, key=b'{"id": 999}', value=b"{not json")
        producer.flush(30)
        execute("postgres", f"INSERT INTO {t} VALUES (2, 'b', 2)")
        sc.run_once()
        sc.assert_converged()
        for cfg in sc.config.followers:
            consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}", "group.id": f"t{uid()}"})
            consumer.assign([TopicPartition(cfg.dlq_topic, 0, 0)])
            msg = consumer.poll(30)
            consumer.close()
            assert msg is not None and msg.value() == b"{not json", cfg.name
            headers = {k: v.decode() for k, v in msg.headers()}
            assert headers["cdcsync.topic"] == topic and headers["cdcsync.offset"] == str(poison_offset)
            assert "value is not JSON" in headers["cdcsync.error"]
            assert headers["cdcsync.follower"] == cfg.name


def test_random_workload_of_10k_changes_converges_in_all_sinks(spark: Any, tmp_path: Path) -> None:
    pg_t, ma_t = f"rand_pg_{uid()}", f"rand_ma_{uid()}"
    ddl = {"postgres": [simple("postgres", pg_t)], "mariadb": [simple("mariadb", ma_t)]}
    tables = {"postgres": [f"public.{pg_t}"], "mariadb": [f"inventory.{ma_t}"]}
    with scenario(spark, tmp_path, tables, ddl) as sc:
        errors: list[BaseException] = []

        def workload(kind: str, table: str, seed: int, changes: int) -> None:
            rng, live, next_id = random.Random(seed), set(), 1
            try:
                done = 0
                while done < changes:
                    batch = []
                    for _ in range(rng.randint(1, 10)):  # several changes per transaction
                        roll = rng.random()
                        if roll < 0.4 or len(live) < 10:
                            batch.append(f"INSERT INTO {table} VALUES ({next_id}, 'n{next_id}', {rng.randint(0, 99)})")
                            live.add(next_id)
                            next_id += 1
                        elif roll < 0.75:
                            k = rng.choice(sorted(live))
                            batch.append(
                                f"UPDATE {table} SET qty = {rng.randint(0, 999)}, name = 'u{done}' WHERE id = {k}"
                            )
                        elif roll < 0.9:
                            k = rng.choice(sorted(live))
                            live.discard(k)
                            batch.append(f"DELETE FROM {table} WHERE id = {k}")
                        else:  # primary-key update
                            k = rng.choice(sorted(live))
                            live.discard(k)
                            live.add(next_id)
                            batch.append(f"UPDATE {table} SET id = {next_id} WHERE id = {k}")
                            next_id += 1
                    execute(kind, *batch)
                    done += len(batch)
            except BaseException as err:
                errors.append(err)

        threads = [
            threading.Thread(target=workload, args=("postgres", pg_t, 1, 5000)),
            threading.Thread(target=workload, args=("mariadb", ma_t, 2, 5000)),
        ]
        for th in threads:
            th.start()
        sc.run_once()  # a first pass while the workload is still running
        for th in threads:
            th.join()
        assert not errors, errors
        sc.run_once()
        sc.assert_converged()


def test_composite_keys_and_table_mappings_reach_every_sink(spark: Any, tmp_path: Path) -> None:
    t = f"lines_{uid()}"
    ddl = {
        "mariadb": [
            f"CREATE TABLE {t} (order_id INT, line VARCHAR(20), sku VARCHAR(20), price DECIMAL(12,4), "
            "shipped_on DATE, attrs JSON, secret VARCHAR(20), PRIMARY KEY (order_id, line))"
        ]
    }
    mapping = {
        f"inventory.{t}": {
            "target": f"{t}_view",
            "include": ["order_id", "line", "sku", "price", "shipped_on", "attrs"],
            "rename": {"sku": "product"},
        }
    }
    with scenario(spark, tmp_path, {"mariadb": [f"inventory.{t}"]}, ddl, mappings=mapping) as sc:
        execute(
            "mariadb",
            f"INSERT INTO {t} VALUES (1, 'a|b', 'S1', 12.5000, '2024-02-29', '{{\"k\": [1]}}', 'x'),"
            f" (1, 'c', 'S2', 0.0001, NULL, NULL, 'y'), (2, 'a|b', 'S3', 99999999.9999, '2000-01-01', '[]', 'z')",
        )
        execute("mariadb", f"UPDATE {t} SET price = 13.2500 WHERE order_id = 1 AND line = 'a|b'")
        execute("mariadb", f"DELETE FROM {t} WHERE order_id = 2")
        sc.run_once()
        sc.assert_converged()
        for follower in TARGETS:
            held = sc.held(follower, f"{t}_view")
            assert set(held) == {"1|a\\|b", "1|c"}, follower
            doc = held["1|a\\|b"][1]
            assert "secret" not in doc and "sku" not in doc and doc["product"] == "S1", (follower, doc)


@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])  # MariaDB: make chaos
def test_truncate_is_not_silent_verify_names_every_row_it_left(spark: Any, tmp_path: Path, kind: str) -> None:
    """TRUNCATE reaches no sink (docs/capture.md): what cdcsync promises is that verify says so, row by row."""
    t = f"trunc_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    ddl = {kind: [simple(kind, t), f"INSERT INTO {t} VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)"]}
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, ddl) as sc:
        sc.run_once()
        sc.assert_converged()
        execute(kind, f"TRUNCATE TABLE {t}")
        execute(kind, f"INSERT INTO {t} VALUES (4, 'd', 4)")  # capture goes on after it
        sc.run_once()
        reports = {r.follower: r for r in sc.verify() if r.table.endswith(f".{t}")}
        for follower in TARGETS:
            report = reports[follower]
            assert (report.extra, report.missing, report.stale) == (["1", "2", "3"], [], []), report.as_dict()
