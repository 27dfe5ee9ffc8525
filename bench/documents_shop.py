"""The shop of ``bench.documents``: its tables, its data, and the same order document for cdcsync and PGSync.

A Postgres schema of its own per run (``bench_<tag>``) holds customers,
products, orders, order lines, tags and the join table of orders and tags;
dropping it removes every table, and the view, function and triggers PGSync
adds to it. Every order has ``LINES`` lines, ``TAGS`` tags and a customer;
the first line of orders 1..``FAN_OUT`` holds the product ``hot``, which no
other line holds (the fan-out's parent row). Line ids are
``(order - 1) * LINES + n``, so a writer can pick one line per order.

The document, for both tools: an order (id, status, placed_at), its customer
as an object (id, name), its lines as a nested array (id, qty, note), each
with its product as an object (sku, title, price), and its tags' labels.
"""

from __future__ import annotations

from typing import Any

from bench.common import ENV

LINES = 3  # lines per order
TAGS = 2  # tags per order
FAN_OUT = 200  # orders holding the product `hot`
CUSTOMER_ORDERS = 5  # orders per customer
PRODUCTS = 10_000
TAG_COUNT = 50
NAMES = ("customers", "products", "orders", "order_lines", "tags", "order_tags")


def ddl(schema: str) -> list[str]:
    """The tables (with their foreign keys and the indexes a lookup by foreign key needs)."""
    s = schema
    return [
        f"CREATE SCHEMA {s}",
        f"CREATE TABLE {s}.customers (id INT PRIMARY KEY, name TEXT NOT NULL, tier TEXT)",
        f"CREATE TABLE {s}.products (sku TEXT PRIMARY KEY, title TEXT NOT NULL, price NUMERIC(10,2))",
        f"CREATE TABLE {s}.orders (id INT PRIMARY KEY, customer_id INT REFERENCES {s}.customers, "
        "status TEXT NOT NULL, placed_at TIMESTAMPTZ NOT NULL)",
        f"CREATE TABLE {s}.order_lines (id INT PRIMARY KEY, order_id INT NOT NULL REFERENCES {s}.orders, "
        f"sku TEXT REFERENCES {s}.products, qty INT NOT NULL, note TEXT NOT NULL)",
        f"CREATE TABLE {s}.tags (id INT PRIMARY KEY, label TEXT NOT NULL)",
        f"CREATE TABLE {s}.order_tags (order_id INT NOT NULL REFERENCES {s}.orders, "
        f"tag_id INT NOT NULL REFERENCES {s}.tags, PRIMARY KEY (order_id, tag_id))",
    ]


def load(schema: str, roots: int) -> list[str]:
    """INSERTs of ``roots`` orders and everything they hold; then the indexes and ANALYZE."""
    s, customers = schema, max(1, roots // CUSTOMER_ORDERS)
    return [
        f"INSERT INTO {s}.customers SELECT g, 'customer ' || g, (ARRAY['gold','silver','bronze'])[1 + g % 3] "
        f"FROM generate_series(1, {customers}) g",
        f"INSERT INTO {s}.products SELECT 'p' || g, 'product ' || g, (g % 1000) * 1.25 "
        f"FROM generate_series(1, {PRODUCTS}) g",
        f"INSERT INTO {s}.products VALUES ('hot', 'hot product', 9.99)",
        f"INSERT INTO {s}.tags SELECT g, 'tag ' || g FROM generate_series(1, {TAG_COUNT}) g",
        f"INSERT INTO {s}.orders SELECT g, 1 + (g - 1) % {customers}, (ARRAY['new','paid','shipped'])[1 + g % 3], "
        f"TIMESTAMPTZ '2026-01-01 00:00:00+00' + g * INTERVAL '1 minute' FROM generate_series(1, {roots}) g",
        f"INSERT INTO {s}.order_lines SELECT (o - 1) * {LINES} + n, o, "
        f"CASE WHEN n = 1 AND o <= {FAN_OUT} THEN 'hot' ELSE 'p' || (1 + (o * 7 + n) % {PRODUCTS}) END, n, '' "
        f"FROM generate_series(1, {roots}) o, generate_series(1, {LINES}) n",
        f"INSERT INTO {s}.order_tags SELECT o, 1 + (o + k * 17) % {TAG_COUNT} "
        f"FROM generate_series(1, {roots}) o, generate_series(0, {TAGS - 1}) k",
        f"CREATE INDEX ON {s}.orders (customer_id)",
        f"CREATE INDEX ON {s}.order_lines (order_id)",
        f"CREATE INDEX ON {s}.order_lines (sku)",
        f"CREATE INDEX ON {s}.order_tags (tag_id)",
        *(f"ANALYZE {s}.{name}" for name in NAMES),
    ]


def row_counts(roots: int) -> dict[str, int]:
    """Rows per table after ``load``: what each table's snapshot puts in its topic."""
    return {
        "customers": max(1, roots // CUSTOMER_ORDERS),
        "products": PRODUCTS + 1,
        "orders": roots,
        "order_lines": roots * LINES,
        "tags": TAG_COUNT,
        "order_tags": roots * TAGS,
    }


def cdcsync_document(schema: str) -> dict[str, Any]:
    """``followers[].documents.orders`` of cdcsync (docs/documents.md)."""
    s = schema
    return {
        "table": f"{s}.orders",
        "target": "orders",
        "columns": ["id", "status", "placed_at"],
        "children": {
            "customer": {
                "table": f"{s}.customers",
                "relation": "many_to_one",
                "foreign_key": "customer_id",
                "columns": ["id", "name"],
            },
            "lines": {
                "table": f"{s}.order_lines",
                "relation": "one_to_many",
                "foreign_key": "order_id",
                "columns": ["id", "qty", "note"],
                "nested": True,
                "children": {
                    "product": {
                        "table": f"{s}.products",
                        "relation": "many_to_one",
                        "foreign_key": "sku",
                        "columns": ["sku", "title", "price"],
                    }
                },
            },
            "tags": {
                "table": f"{s}.tags",
                "relation": "many_to_many",
                "through": {"table": f"{s}.order_tags", "parent_key": "order_id", "child_key": "tag_id"},
                "scalar": "label",
            },
        },
    }


def cdcsync_config(tag: str, schema: str, tmp: str, heartbeat_ms: int = 1000) -> dict[str, Any]:
    """The config document: the shop's tables captured, one document follower on the stack's Elasticsearch.

    The background verification is off: it reads the source and the store at its own pace, work PGSync
    has no counterpart of, and the phases would measure it too.
    """
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": [
            {
                "name": f"{tag}_pg",
                "kind": "postgres",
                "host": "127.0.0.1",
                "port": int(ENV["PG_PORT"]),
                "database": ENV["PG_DATABASE"],
                "user": ENV["PG_USER"],
                "password": ENV["PG_PASSWORD"],
                "tables": [f"{schema}.{name}" for name in NAMES],
                "heartbeat_interval_ms": heartbeat_ms,
            }
        ],
        "followers": [
            {
                "name": "search",
                "kind": "elasticsearch",
                "url": f"http://127.0.0.1:{ENV['ES_PORT']}",
                "prefix": f"{tag}-",
                "dead_letter_topic": f"dlq.{tag}.search",
                "checkpoint_dir": f"{tmp}/ckpt-search",
                "verify": {"enabled": False},
                "documents": {"orders": cdcsync_document(schema)},
            }
        ],
        "state_dir": tmp,
    }


def pgsync_schema(schema: str, index: str) -> list[dict[str, Any]]:
    """PGSync's schema.json for the same document (its format: the README and examples/ of toluaina/pgsync).

    A ``one_to_one`` child whose foreign key is the parent's column is an object; ``one_to_many`` an array;
    ``through_tables`` a many-to-many; ``variant: scalar`` with one column an array of its values. ``lines``
    is mapped ``nested``, as cdcsync's, and the index refreshes every second (the default, set explicitly so
    an index without searches still refreshes).
    """

    def fk(parent: str, child: str) -> dict[str, list[str]]:
        return {"parent": [parent], "child": [child]}

    return [
        {
            "database": ENV["PG_DATABASE"],
            "index": index,
            "setting": {"refresh_interval": "1s"},
            "mapping": {"lines": {"type": "nested"}},
            "nodes": {
                "table": "orders",
                "schema": schema,
                "columns": ["id", "status", "placed_at"],
                "children": [
                    {
                        "table": "customers",
                        "schema": schema,
                        "label": "customer",
                        "columns": ["id", "name"],
                        "relationship": {
                            "variant": "object",
                            "type": "one_to_one",
                            "foreign_key": fk("customer_id", "id"),
                        },
                    },
                    {
                        "table": "order_lines",
                        "schema": schema,
                        "label": "lines",
                        "columns": ["id", "qty", "note"],
                        "relationship": {
                            "variant": "object",
                            "type": "one_to_many",
                            "foreign_key": fk("id", "order_id"),
                        },
                        "children": [
                            {
                                "table": "products",
                                "schema": schema,
                                "label": "product",
                                "columns": ["sku", "title", "price"],
                                "relationship": {
                                    "variant": "object",
                                    "type": "one_to_one",
                                    "foreign_key": fk("sku", "sku"),
                                },
                            }
                        ],
                    },
                    {
                        "table": "tags",
                        "schema": schema,
                        "label": "tags",
                        "columns": ["label"],
                        "relationship": {
                            "variant": "scalar",
                            "type": "one_to_many",
                            "through_tables": ["order_tags"],
                        },
                    },
                ],
            },
        }
    ]
