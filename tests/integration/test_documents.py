"""Documents end to end: a shop's tables in Postgres -> Debezium -> Kafka -> document followers -> Elasticsearch
and Redis; every document then compared with the one SQL builds from the source (``verify_documents``).

The changes cover each way a document changes: a child inserted, updated, moved to another parent and deleted,
a parent's key updated (its children follow by ON UPDATE CASCADE), a middle level changed (fan-out to every
document holding it), the join table's rows, a hot parent with 200 children, deletes at every level.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from elasticsearch import Elasticsearch

from cdcsync.config import Config
from cdcsync.connectors.apply import apply
from cdcsync.sync.build import build_follower
from cdcsync.sync.documents.verify import verify_documents
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.stream import start_query
from tests.support import ENV, drop_capture, execute, read_topic, source_dict, uid, wait_streaming


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-document-tests")
    yield session
    session.stop()


def shop(tag: str) -> tuple[list[str], dict[str, str]]:
    """DDL of a shop's tables named after ``tag``, and each table's name by role."""
    t = {r: f"{r}_{tag}" for r in ("customers", "products", "orders", "lines", "tags", "order_tags", "tick")}
    ddl = [
        f"CREATE TABLE {t['customers']} (id INT PRIMARY KEY, name TEXT NOT NULL, tier TEXT)",
        f"CREATE TABLE {t['products']} (sku TEXT PRIMARY KEY, title TEXT NOT NULL, price NUMERIC(10,2))",
        f"CREATE TABLE {t['orders']} (id INT PRIMARY KEY, customer_id INT, status TEXT NOT NULL, "
        "placed_at TIMESTAMPTZ NOT NULL DEFAULT '2026-01-02 03:04:05+00')",
        f"CREATE TABLE {t['lines']} (order_id INT NOT NULL REFERENCES {t['orders']} ON UPDATE CASCADE "
        "ON DELETE CASCADE, n INT NOT NULL, sku TEXT, qty INT NOT NULL, PRIMARY KEY (order_id, n))",
        f"CREATE TABLE {t['tags']} (id INT PRIMARY KEY, label TEXT NOT NULL)",
        f"CREATE TABLE {t['order_tags']} (order_id INT NOT NULL REFERENCES {t['orders']} ON UPDATE CASCADE "
        "ON DELETE CASCADE, tag_id INT NOT NULL, PRIMARY KEY (order_id, tag_id))",
        f"CREATE TABLE {t['tick']} (id INT PRIMARY KEY)",
        f"INSERT INTO {t['customers']} SELECT g, 'customer ' || g, 'gold' FROM generate_series(1, 5) g",
        f"INSERT INTO {t['products']} SELECT 'p' || g, 'product ' || g, g * 1.25 FROM generate_series(1, 5) g",
        f"INSERT INTO {t['tags']} SELECT g, 'tag ' || g FROM generate_series(1, 4) g",
        f"INSERT INTO {t['orders']} (id, customer_id, status) SELECT g, 1 + g % 5, 'new' FROM generate_series(1, 20) g",
        f"INSERT INTO {t['lines']} SELECT o, n, 'p' || (1 + (o + n) % 5), n FROM generate_series(1, 20) o, "
        "generate_series(1, 3) n",
        f"INSERT INTO {t['order_tags']} SELECT o, 1 + o % 4 FROM generate_series(1, 20) o",
        f"INSERT INTO {t['tick']} VALUES (0)",
    ]
    return ddl, t


def documents(t: dict[str, str]) -> dict[str, Any]:
    order = {
        "table": f"public.{t['orders']}",
        "target": "orders",
        "columns": ["id", "status", "placed_at"],
        "rename": {"status": "state"},
        "children": {
            "customer": {
                "table": t["customers"],
                "relation": "many_to_one",
                "foreign_key": "customer_id",
                "columns": ["id", "name"],
            },  # fmt: skip
            "lines": {
                "table": t["lines"],
                "relation": "one_to_many",
                "foreign_key": "order_id",
                "columns": ["n", "qty"],
                "nested": True,
                "children": {
                    "product": {
                        "table": t["products"],
                        "relation": "many_to_one",
                        "foreign_key": "sku",
                        "columns": ["sku", "title", "price"],
                    },  # fmt: skip
                },
            },
            "tags": {
                "table": t["tags"],
                "relation": "many_to_many",
                "through": {"table": t["order_tags"], "parent_key": "order_id", "child_key": "tag_id"},
                "scalar": "label",
            },
        },
    }
    customer = {  # three levels below the root
        "table": t["customers"],
        "target": "customers",
        "children": {
            "orders": {
                "table": t["orders"],
                "relation": "one_to_many",
                "foreign_key": "customer_id",
                "columns": ["id", "status"],
                "children": {
                    "lines": {
                        "table": t["lines"],
                        "relation": "one_to_many",
                        "foreign_key": "order_id",
                        "columns": ["n", "qty"],
                        "children": {
                            "product": {
                                "table": t["products"],
                                "relation": "many_to_one",
                                "foreign_key": "sku",
                                "columns": ["title"],
                            },  # fmt: skip
                        },
                    }
                },
            }
        },
    }
    return {"orders": order, "customers": customer}


class Shop:
    def __init__(self, spark: Any, tmp: Path) -> None:
        self.tag = f"d{uid()}"
        ddl, self.t = shop(self.tag)
        execute("postgres", *ddl)
        docs = documents(self.t)
        tables = [f"public.{name}" for name in self.t.values()]
        self.raw = {
                "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
                "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
                "sources": [source_dict("postgres", f"{self.tag}_pg", tables)],
                "followers": [
                    {"name": "search", "kind": "elasticsearch", "url": f"http://127.0.0.1:{ENV['ES_PORT']}",
                     "prefix": f"{self.tag}-", "dead_letter_topic": f"dlq.{self.tag}.search",
                     "checkpoint_dir": str(tmp / "ckpt-search"), "documents": docs},
                    {"name": "cache", "kind": "redis", "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0",
                     "prefix": self.tag, "dead_letter_topic": f"dlq.{self.tag}.cache",
                     "checkpoint_dir": str(tmp / "ckpt-cache"), "documents": {"orders": docs["orders"]}},
                ],
                "state_dir": str(tmp),
        }  # fmt: skip
        self.config = Config.model_validate(self.raw)
        self.spark = spark
        self.ticks = 0
        self.running: dict[str, Any] = {}

    def run_once(self) -> None:
        """Apply everything committed so far, as `cdcsync run --once`."""
        self.ticks += 1
        execute("postgres", f"INSERT INTO {self.t['tick']} VALUES ({self.ticks})")
        source = self.config.sources[0]
        tick = next(t for t in source.tables if t.table == self.t["tick"])
        read_topic(source.topic(tick), lambda rs: any(r.key == {"id": self.ticks} for r in rs), timeout=180)
        for follower in self.config.followers:
            running = self.running.get(follower.name) or build_follower(self.config, follower, self.spark)
            self.running[follower.name] = running
            query = start_query(self.spark, self.config, follower, running, once=True)
            query.awaitTermination(600)
            assert query.exception() is None, query.exception()

    def assert_converged(self) -> None:
        for follower in self.config.followers:
            sink = build_sink(self.config, follower, self.spark)
            for report in verify_documents(self.config, follower, sink):
                assert report.clean, report.as_dict()
                assert report.source_rows > 0, report.as_dict()
            sink.close()

    def close(self) -> None:
        for running in self.running.values():
            running.sink.close()
            running.mirror.close()
        drop_capture(self.config)
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        es.indices.delete(index=f"{self.tag}-*", ignore_unavailable=True, allow_no_indices=True)
        r = redis.Redis(port=int(ENV["REDIS_PORT"]))
        for key in r.scan_iter(f"{self.tag}*", count=1000):
            r.delete(key)
        for name in ("order_tags", "lines", "orders", "tags", "products", "customers", "tick"):
            execute("postgres", f"DROP TABLE IF EXISTS {self.t[name]}")


@pytest.fixture
def store(spark: Any, tmp_path: Path) -> Iterator[Shop]:
    s = Shop(spark, tmp_path)
    try:
        apply(s.config)
        wait_streaming(s.config)
        yield s
    finally:
        s.close()


def es_doc(shop: Shop, target: str, key: str) -> dict[str, Any]:
    es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
    return es.get(index=f"{shop.tag}-{target}", id=key)["_source"]


def test_every_change_of_a_related_table_reaches_the_documents_it_belongs_to(store: Shop) -> None:
    t = store.t
    store.run_once()
    store.assert_converged()
    first = es_doc(store, "orders", "1")
    assert [line["n"] for line in first["lines"]] == [1, 2, 3]
    assert first["customer"] == {"id": 2, "name": "customer 2"} and first["tags"] == ["tag 2"]
    mapping = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}").indices.get_mapping(index=f"{store.tag}-orders")
    assert next(iter(mapping.values()))["mappings"]["properties"]["lines"]["type"] == "nested"

    execute(
        "postgres",
        # a child inserted, updated, moved to another parent, deleted
        f"INSERT INTO {t['lines']} VALUES (1, 4, 'p1', 7)",
        f"UPDATE {t['lines']} SET qty = 99 WHERE order_id = 2 AND n = 1",
        f"UPDATE {t['lines']} SET order_id = 3, n = 10 WHERE order_id = 2 AND n = 2",
        f"DELETE FROM {t['lines']} WHERE order_id = 4 AND n = 3",
        # an order moved to another customer; a parent's key updated, its lines and tags following (CASCADE)
        f"UPDATE {t['orders']} SET customer_id = 5 WHERE id = 6",
        f"UPDATE {t['orders']} SET id = 1000 WHERE id = 7",
        # a middle level changed (every order with a line of p3) and one deleted (its lines keep a dangling sku)
        f"UPDATE {t['products']} SET title = 'renamed', price = 0.01 WHERE sku = 'p3'",
        f"DELETE FROM {t['products']} WHERE sku = 'p4'",
        # the join table and the tags behind it
        f"INSERT INTO {t['order_tags']} VALUES (1, 3), (1, 4)",
        f"DELETE FROM {t['order_tags']} WHERE order_id = 5",
        f"UPDATE {t['tags']} SET label = 'relabelled' WHERE id = 3",
        # deletes at every level: a customer (orders keep a dangling customer_id), an order (cascading), a tag
        f"DELETE FROM {t['customers']} WHERE id = 4",
        f"DELETE FROM {t['orders']} WHERE id = 8",
        f"DELETE FROM {t['tags']} WHERE id = 2",
        # a hot parent: 200 lines under one order, in one transaction
        f"INSERT INTO {t['lines']} SELECT 9, n, 'p' || (1 + n % 5), n FROM generate_series(100, 299) n",
    )
    store.run_once()
    store.assert_converged()
    assert len(es_doc(store, "orders", "9")["lines"]) == 203
    assert es_doc(store, "orders", "1000")["id"] == 1000
    cache = redis.Redis(port=int(ENV["REDIS_PORT"]), decode_responses=True)
    assert not cache.exists(f"{store.tag}:orders:7") or not cache.hgetall(f"{store.tag}:orders:7")
    cached = json.loads(cache.hget(f"{store.tag}:orders:1000", "doc") or "{}")  # the document as one JSON text
    searched = {k: v for k, v in es_doc(store, "orders", "1000").items() if not k.startswith("cdcsync_")}
    assert cached["id"] == 1000 and cached["lines"] and cached == searched

    # The same rows again in one transaction touching every table: documents built from the newest state
    execute(
        "postgres",
        f"UPDATE {t['customers']} SET name = name || '!'",
        f"UPDATE {t['orders']} SET status = 'paid' WHERE id % 2 = 0",
        f"DELETE FROM {t['lines']} WHERE n = 1",
        f"UPDATE {t['products']} SET title = title || '+'",
    )
    store.run_once()
    store.assert_converged()

    # verify sees a document that differs, one missing and one the source has no root for
    es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
    held = es_doc(store, "orders", "3")
    es.index(index=f"{store.tag}-orders", id="3", document={**held, "lines": held["lines"][1:]}, refresh=True)
    cache.delete(f"{store.tag}:orders:5")
    stray = {**cache.hgetall(f"{store.tag}:orders:3")}
    assert set(stray) == {"doc", "_v"}, stray
    cache.hset(f"{store.tag}:orders:7777", mapping=stray)
    search = store.config.follower("search")
    (orders, customers) = verify_documents(store.config, search, build_sink(store.config, search, store.spark))
    assert (orders.stale, orders.missing, orders.extra) == (["3"], [], []), orders.as_dict()
    assert set(orders.differing["3"]) == {"lines"}
    assert customers.clean and customers.source_rows == 4, customers.as_dict()
    cached = store.config.follower("cache")
    (orders,) = verify_documents(store.config, cached, build_sink(store.config, cached, store.spark))
    assert (orders.stale, orders.missing, orders.extra) == ([], ["5"], ["7777"]), orders.as_dict()
    assert orders.source_rows == 19

    # repair rewrites those documents from the mirror, above the versions written, and removes the stray one
    from cdcsync.snapshot.documents import reindex_documents, repair_documents

    for name in ("search", "cache"):
        follower = store.config.follower(name)
        reports = verify_documents(store.config, follower, build_sink(store.config, follower, store.spark))
        repair_documents(store.config, follower, store.spark, [r for r in reports if not r.clean])
    store.assert_converged()

    # A reindex rebuilds every document from the mirror into a new generation and switches: what the stores
    # lost is there again; changes applied meanwhile are kept.
    es.delete(index=f"{store.tag}-orders", id="3", refresh=True)

    done: dict[str, Any] = {}

    def rebuild() -> None:
        for name in ("search", "cache"):
            done[name] = reindex_documents(store.config, store.config.follower(name), store.spark)

    worker = threading.Thread(target=rebuild)
    worker.start()
    for i in range(3):
        execute("postgres", f"UPDATE {t['lines']} SET qty = qty + 1 WHERE order_id = {10 + i}",
                f"UPDATE {t['customers']} SET tier = 'tier {i}'")  # fmt: skip
        store.run_once()
    worker.join(300)
    assert done["search"].written == {"orders": 19, "customers": 4}, done
    assert done["cache"].written == {"orders": 19}, done
    store.run_once()
    store.assert_converged()
    aliases = es.indices.get_alias(name=f"{store.tag}-orders")
    assert list(aliases) != [f"{store.tag}-orders-000001"], aliases  # a new generation is live

    # A document past the nested objects' limit is not written cut: it goes to the dead-letter topic with the
    # reason, and the store keeps the one before.
    store.running["search"].nested_limit = 100
    before = es_doc(store, "orders", "9")
    execute("postgres", f"UPDATE {t['lines']} SET qty = 7777 WHERE order_id = 9 AND n = 2")
    store.run_once()
    refused = read_topic(f"dlq.{store.tag}.search", lambda rs: any(r.key == {"id": "9"} for r in rs), timeout=60)
    assert next(r for r in refused if r.key == {"id": "9"}).value["document"] == "orders"
    assert es_doc(store, "orders", "9") == before


def test_a_new_document_follower_is_bootstrapped_from_the_topics_then_streams_from_there(store: Shop) -> None:
    from cdcsync.snapshot.bootstrap import bootstrap_from_topics
    from cdcsync.state import base_dir
    from cdcsync.sync.stream import checkpoint_dir

    t = store.t
    execute("postgres", f"UPDATE {t['lines']} SET qty = qty * 2 WHERE n = 2", f"DELETE FROM {t['orders']} WHERE id = 4")
    store.run_once()  # everything so far is in the topics
    search = store.config.follower("search")
    late = {**store.raw["followers"][0], "name": "late", "prefix": f"{store.tag}-late-", "checkpoint_dir": None,
            "dead_letter_topic": f"dlq.{store.tag}.late"}  # fmt: skip
    store.config = Config.model_validate({**store.raw, "followers": [*store.raw["followers"], late]})
    cfg = store.config.follower("late")
    built = build_follower(store.config, cfg, store.spark, open_sink=False, fill=True)
    summary = bootstrap_from_topics(store.config, cfg, built, checkpoint_dir(store.config, cfg), base_dir(store.config))
    assert summary.dead_lettered == 0 and summary.records > 0, summary
    store.running["late"] = build_follower(store.config, cfg, store.spark)  # the daemon's, after the bootstrap
    built.sink.close()
    built.mirror.close()
    sink = build_sink(store.config, cfg, store.spark)
    assert all(r.clean for r in verify_documents(store.config, cfg, sink))
    assert search.documents is not None
    execute("postgres", f"UPDATE {t['customers']} SET name = 'after the bootstrap'")
    store.run_once()  # streams from where the bootstrap stopped
    store.assert_converged()


def test_documents_of_a_mariadb_source_with_text_and_composite_keys_converge(spark: Any, tmp_path: Path) -> None:
    tag = f"m{uid()}"
    t = {r: f"{r}_{tag}" for r in ("orders", "lines", "tags", "order_tags", "tick")}
    execute(
        "mariadb",
        f"CREATE TABLE {t['orders']} (code VARCHAR(40) PRIMARY KEY, total DECIMAL(12,2), placed DATETIME(3))",
        f"CREATE TABLE {t['lines']} (code VARCHAR(40) NOT NULL, n INT NOT NULL, qty INT, note TEXT, "
        "PRIMARY KEY (code, n))",
        f"CREATE TABLE {t['tags']} (id INT PRIMARY KEY, label VARCHAR(40))",
        f"CREATE TABLE {t['order_tags']} (code VARCHAR(40) NOT NULL, tag INT NOT NULL, PRIMARY KEY (code, tag))",
        f"CREATE TABLE {t['tick']} (id INT PRIMARY KEY)",
        f"INSERT INTO {t['orders']} VALUES ('A-1', 10.50, '2026-01-02 03:04:05.678'), ('b|2', NULL, NULL), "
        "('Ü 3', 0.01, '1999-12-31 23:59:59.999')",
        f"INSERT INTO {t['lines']} VALUES ('A-1', 1, 2, 'x'), ('A-1', 2, 1, NULL), ('b|2', 1, 5, 'ü')",
        f"INSERT INTO {t['tags']} VALUES (1, 'red'), (2, 'blue')",
        f"INSERT INTO {t['order_tags']} VALUES ('A-1', 1), ('A-1', 2), ('Ü 3', 2)",
    )
    database = ENV["MARIADB_DATABASE"]
    document = {
        "table": t["orders"],
        "children": {
            "lines": {"table": t["lines"], "relation": "one_to_many", "foreign_key": "code", "nested": True,
                      "columns": ["n", "qty", "note"]},
            "tags": {"table": t["tags"], "relation": "many_to_many", "scalar": "label",
                     "through": {"table": t["order_tags"], "parent_key": "code", "child_key": "tag"}},
        },
    }  # fmt: skip
    raw = {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": [source_dict("mariadb", f"{tag}_ma", [f"{database}.{n}" for n in t.values()])],
        "followers": [
            {"name": "search", "kind": "elasticsearch", "url": f"http://127.0.0.1:{ENV['ES_PORT']}",
             "prefix": f"{tag}-", "dead_letter_topic": f"dlq.{tag}.search", "documents": {"orders": document}},
            {"name": "cache", "kind": "redis", "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0", "prefix": tag,
             "dead_letter_topic": f"dlq.{tag}.cache", "documents": {"orders": document}},
        ],
        "state_dir": str(tmp_path),
    }  # fmt: skip
    config = Config.model_validate(raw)
    running: dict[str, Any] = {}
    ticks = 0

    def run_once() -> None:
        nonlocal ticks
        ticks += 1
        execute("mariadb", f"INSERT INTO {t['tick']} VALUES ({ticks})")
        tick = next(x for x in config.sources[0].tables if x.table == t["tick"])
        read_topic(config.sources[0].topic(tick), lambda rs: any(r.key == {"id": ticks} for r in rs), timeout=180)
        for follower in config.followers:
            running[follower.name] = running.get(follower.name) or build_follower(config, follower, spark)
            query = start_query(spark, config, follower, running[follower.name], once=True)
            query.awaitTermination(600)
            assert query.exception() is None, query.exception()
        for follower in config.followers:
            sink = build_sink(config, follower, spark)
            reports = verify_documents(config, follower, sink)
            assert all(r.clean and r.source_rows == 3 for r in reports), [r.as_dict() for r in reports]
            sink.close()

    try:
        apply(config)
        wait_streaming(config)
        run_once()
        execute(
            "mariadb",
            f"UPDATE {t['lines']} SET code = 'Ü 3', n = 9 WHERE code = 'A-1' AND n = 2",  # a child moved
            f"UPDATE {t['orders']} SET total = 99999999.99 WHERE code = 'b|2'",
            f"UPDATE {t['tags']} SET label = 'green' WHERE id = 2",
            f"DELETE FROM {t['order_tags']} WHERE code = 'A-1' AND tag = 1",
            f"DELETE FROM {t['orders']} WHERE code = 'A-1'",
            f"INSERT INTO {t['orders']} VALUES ('A-1 again', 1.00, NULL)",
        )
        run_once()
        doc = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}").get(index=f"{tag}-orders", id="Ü 3")["_source"]
        assert [line["n"] for line in doc["lines"]] == [9] and doc["tags"] == ["green"]
    finally:
        for r in running.values():
            r.sink.close()
            r.mirror.close()
        drop_capture(config)
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        es.indices.delete(index=f"{tag}-*", ignore_unavailable=True, allow_no_indices=True)
        cache = redis.Redis(port=int(ENV["REDIS_PORT"]))
        for key in cache.scan_iter(f"{tag}*", count=1000):
            cache.delete(key)
        for name in t.values():
            execute("mariadb", f"DROP TABLE IF EXISTS {name}")
