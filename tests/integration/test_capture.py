"""Capture end to end: source database -> Debezium on Kafka Connect -> compacted Kafka topic."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support import ENV, execute, read_topic, uid

KINDS = ["postgres", "mariadb"]


def table_ddl(kind: str, table: str) -> str:
    text = "text" if kind == "postgres" else "VARCHAR(100)"
    return f"CREATE TABLE {table} (id INT PRIMARY KEY, name {text} NOT NULL, qty INT NOT NULL)"


@pytest.mark.parametrize("kind", KINDS)
def test_changes_reach_topic_keyed_in_commit_order_with_tombstones(kind: str) -> None:
    from tests.support import captured

    table = f"crud_{uid()}"
    qualified = f"{'public' if kind == 'postgres' else ENV['MARIADB_DATABASE']}.{table}"
    with captured(kind, [table_ddl(kind, table), f"INSERT INTO {table} VALUES (1, 'before', 1)"], [qualified]) as cfg:
        topic = cfg.sources[0].topic(cfg.sources[0].tables[0])
        # One transaction per step, so commit order is the order below.
        execute(kind, f"INSERT INTO {table} VALUES (2, 'two', 2)")
        execute(kind, f"INSERT INTO {table} VALUES (3, 'three', 3)")
        execute(kind, f"UPDATE {table} SET qty = 20, name = 'two!' WHERE id = 2")
        execute(kind, f"DELETE FROM {table} WHERE id = 3")
        execute(kind, f"UPDATE {table} SET id = 10 WHERE id = 1")  # primary-key update
        execute(kind, f"INSERT INTO {table} VALUES (4, 'four', 4)", f"UPDATE {table} SET qty = 44 WHERE id = 4")

        expected = [
            ({"id": 1}, "r"),
            ({"id": 2}, "c"),
            ({"id": 3}, "c"),
            ({"id": 2}, "u"),
            ({"id": 3}, "d"),
            ({"id": 3}, None),  # delete, then its tombstone
            ({"id": 1}, "d"),
            ({"id": 1}, None),
            ({"id": 10}, "c"),  # PK update: old key gone, new key created
            ({"id": 4}, "c"),
            ({"id": 4}, "u"),
        ]
        records = read_topic(topic, lambda rs: len(rs) >= len(expected))
        assert [(r.key, r.op) for r in records] == expected

        after = {r.offset: r.value["after"] for r in records if r.value and r.value["after"]}
        assert after[records[3].offset] == {"id": 2, "name": "two!", "qty": 20}
        assert after[records[8].offset] == {"id": 10, "name": "before", "qty": 1}
        assert records[-1].value["after"] == {"id": 4, "name": "four", "qty": 44}
        assert records[4].value["before"]["id"] == 3 and records[4].value["after"] is None

        # The PK update's delete and create carry the same source position.
        pk_delete, pk_create = records[6].value["source"], records[8].value["source"]
        position = ("lsn", "txId") if kind == "postgres" else ("file", "pos", "gtid")
        assert [pk_delete[k] for k in position] == [pk_create[k] for k in position]

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        described = admin.describe_configs([resource])[resource].result(timeout=30)
        assert described["cleanup.policy"].value == "compact"


def test_mariadb_events_carry_gtids() -> None:
    from tests.support import captured

    table = f"gtid_{uid()}"
    qualified = f"{ENV['MARIADB_DATABASE']}.{table}"
    with captured("mariadb", [table_ddl("mariadb", table)], [qualified]) as cfg:
        execute("mariadb", f"INSERT INTO {table} VALUES (1, 'a', 1)")
        execute("mariadb", f"INSERT INTO {table} VALUES (2, 'b', 2)")
        records = read_topic(cfg.sources[0].topic(cfg.sources[0].tables[0]), lambda rs: len(rs) >= 2)
        gtids = [r.value["source"]["gtid"] for r in records]
        domains, servers, seqs = zip(*(tuple(int(p) for p in g.split("-")) for g in gtids), strict=True)
        assert domains == (0, 0) and servers == (1, 1)
        assert seqs[0] < seqs[1]
