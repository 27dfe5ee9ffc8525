"""Deletes and the log cleaner: a follower behind the cleaner never keeps a deleted row silently.

The log cleaner removes a delete's ``op=d`` event once its tombstone follows
it, and a tombstone carries no version. Each test makes the real broker clean
the table topics within seconds (``segment.ms`` of one second, a dirty ratio
of 0.01) while the followers are stopped and rows are deleted:

- within the compaction horizon (``min.compaction.lag.ms``, which
  ``connectors apply`` sets) the ``d`` events survive and every sink drops the
  rows;
- past it, each follower refuses to start, names itself and ``reindex``; a
  reindex makes the store equal the source again and lets it start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cdcsync.connectors.apply import apply
from cdcsync.connectors.topics import delete_topics
from cdcsync.sync.position import PositionError
from tests.integration.followers import Scenario, scenario
from tests.support import ENV, execute, uid

ROWS = 120
WIDE = 20_000  # characters of the wide column on every third row


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-tests")
    yield session
    session.stop()


def servers() -> str:
    return f"127.0.0.1:{ENV['KAFKA_PORT']}"


def ddl(kind: str, t: str) -> list[str]:
    """A table of ROWS rows, every third with a wide text column."""
    if kind == "postgres":
        body = f"CASE WHEN g % 3 = 0 THEN repeat('x', {WIDE}) ELSE 'row ' || g END"
        fill = f"SELECT g, {body} FROM generate_series(1, {ROWS}) g"
        return [f"CREATE TABLE {t} (id INT PRIMARY KEY, body TEXT NOT NULL)", f"INSERT INTO {t} {fill}"]
    fill = f"SELECT seq, IF(seq % 3 = 0, REPEAT('x', {WIDE}), CONCAT('row ', seq)) FROM seq_1_to_{ROWS}"
    return [f"CREATE TABLE {t} (id INT PRIMARY KEY, body MEDIUMTEXT NOT NULL)", f"INSERT INTO {t} {fill}"]


def clean_eagerly(topics: list[str]) -> None:
    """Let the cleaner take a segment one second after it opened, with almost any dirt (horizon unchanged)."""
    resources = []
    for topic in topics:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        for key, value in (("segment.ms", "1000"), ("min.cleanable.dirty.ratio", "0.01")):
            resource.add_incremental_config(ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET))
        resources.append(resource)
    admin = AdminClient({"bootstrap.servers": servers()})  # kept alive until the futures resolve
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def roll_segments(sc: Scenario, kind: str, t: str, times: int = 4) -> None:
    """Append to the table a few times, a second and a half apart: each append closes the segment before it."""
    for i in range(times):
        time.sleep(1.5)
        execute(kind, f"UPDATE {t} SET body = 'roll {i}' WHERE id = 1")
    sc.caught_up()


def read_all(topic: str) -> list[tuple[Any, Any]]:
    """Every record in a single-partition topic now, oldest first: (key, value); bytes as stored."""
    consumer = Consumer({"bootstrap.servers": servers(), "group.id": f"test-{uid()}", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        records, last = [], low - 1
        deadline = time.monotonic() + 60
        while last < high - 1 and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if not msg.error():
                    last = msg.offset()
                    records.append((msg.key(), msg.value()))
        return records
    finally:
        consumer.close()


def ops_by_key(topic: str) -> dict[int, list[str | None]]:
    """Each key's records in the topic now, oldest first: 'c'/'u'/'d'/'r', None for a tombstone."""
    seen: dict[int, list[str | None]] = {}
    for key, value in read_all(topic):
        seen.setdefault(json.loads(key)["id"], []).append(json.loads(value)["op"] if value is not None else None)
    return seen


def control_compacted(within_s: float = 120) -> None:
    """Wait until the broker's cleaner has compacted a horizon-less control topic: it has had its pass."""
    topic = f"ctl.{uid()}"
    admin = AdminClient({"bootstrap.servers": servers()})
    config = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)
    try:
        producer = Producer({"bootstrap.servers": servers()})
        for i in range(6):
            producer.produce(topic, key=b"k", value=str(i).encode())
            producer.flush(10)
            time.sleep(1.2)
        deadline = time.monotonic() + within_s
        while len(read_all(topic)) >= 6:
            assert time.monotonic() < deadline, f"the broker's log cleaner did not compact {topic} in {within_s}s"
            time.sleep(2)
    finally:
        admin.delete_topics([topic])


def delete_some(kind: str, t: str) -> list[int]:
    """Delete every fifth row (wide ones among them) and update others: the changes a follower must not miss."""
    gone = list(range(5, ROWS + 1, 5))
    execute(kind, f"DELETE FROM {t} WHERE id % 5 = 0", f"UPDATE {t} SET body = 'changed' WHERE id % 7 = 0")
    return gone


def test_deletes_survive_the_cleaner_within_the_horizon(spark: Any, tmp_path: Path) -> None:
    t = f"cmp_{uid()}"
    names = {"postgres": f"{t}_pg", "mariadb": f"{t}_ma"}
    kinds = {"postgres": [f"public.{names['postgres']}"], "mariadb": [f"inventory.{names['mariadb']}"]}
    with scenario(spark, tmp_path, kinds, {k: ddl(k, names[k]) for k in kinds}) as sc:
        sc.run_once()
        sc.assert_converged()
        topics = [s.topic(tr) for s in sc.config.sources for tr in s.tables if tr.table in names.values()]
        clean_eagerly(topics)
        for kind, name in names.items():
            delete_some(kind, name)
        for kind, name in names.items():
            roll_segments(sc, kind, name)
        control_compacted()
        time.sleep(5)  # the cleaner takes the logs one after another
        sc.run_once()
        sc.assert_converged()
        for follower in ("search", "cache", "warehouse"):
            for name in names.values():
                assert len(sc.held(follower, name)) == ROWS - ROWS // 5, (follower, name)


def test_a_follower_past_the_horizon_refuses_and_reindex_repairs_it(spark: Any, tmp_path: Path) -> None:
    from cdcsync.snapshot.reindex import reindex

    t = f"hzn_{uid()}"
    horizon_s = 30  # the reindexes and the restart must fit inside it, on a loaded machine too
    with scenario(
        spark, tmp_path, {"postgres": [f"public.{t}"]}, {"postgres": ddl("postgres", t)},
        source_options={"compaction_horizon_s": horizon_s},
    ) as sc:  # fmt: skip
        sc.run_once()
        source = sc.config.sources[0]
        topic = next(source.topic(tr) for tr in source.tables if tr.table == t)
        clean_eagerly([topic])
        gone = delete_some("postgres", t)
        deadline = time.monotonic() + 180
        while True:  # until the cleaner has removed the d events of the deleted rows
            roll_segments(sc, "postgres", t, times=2)
            ops = ops_by_key(topic)
            if not any("d" in ops.get(key, []) for key in gone):
                break
            assert time.monotonic() < deadline, "the cleaner did not remove the d events past the horizon"
        for cfg in sc.config.followers:
            with pytest.raises(PositionError) as refused:
                sc.run_once(cfg.name)
            message = str(refused.value)
            assert f"follower {cfg.name}" in message and f"cdcsync reindex {cfg.name}" in message, message
            assert "compaction horizon" in message, message
        # Redis is left out: its reindex keeps live rows the rebuilt store does not know (docs/reindex.md).
        for name in ("search", "warehouse"):
            reindex(sc.config, sc.config.follower(name), spark)
        sc.run_once("search", "warehouse")
        sc.assert_converged("search", "warehouse")


def test_apply_sets_the_horizon_on_new_topics_and_corrects_existing_ones(tmp_path: Path) -> None:
    from tests.support import config_for, drop_capture, source_dict

    t = f"hz_{uid()}"
    execute("postgres", f"CREATE TABLE {t} (id INT PRIMARY KEY)")
    config = config_for(source_dict("postgres", f"t{uid()}_pg", [f"public.{t}"], compaction_horizon_s=3600))
    topic = config.sources[0].topic(config.sources[0].tables[0])
    admin = AdminClient({"bootstrap.servers": servers()})
    try:
        admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(timeout=30)
        result = apply(config)[0]
        assert (
            f"topic {topic}: corrected min.compaction.lag.ms 0 -> 3600000, delete.retention.ms 86400000 -> 3600000"
            in result.topics
        ), result.topics
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        current = next(iter(described.values())).result(timeout=30)
        assert current["min.compaction.lag.ms"].value == "3600000"
        assert current["delete.retention.ms"].value == "3600000"
        assert current["cleanup.policy"].value == "compact"
        assert not any(topic in line for line in apply(config)[0].topics)  # applied twice: nothing to correct
    finally:
        drop_capture(config)
        delete_topics(config, [topic])
        execute("postgres", f"DROP TABLE IF EXISTS {t}")
