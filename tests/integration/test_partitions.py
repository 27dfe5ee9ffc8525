"""Table topics of several partitions (``sources[].topic_partitions``), end to end.

Capture keys each record by the row's primary key only, and Kafka Connect's producer puts a keyed record in
partition ``murmur2(key bytes) % partitions`` (Kafka's built-in partitioner; Debezium sets no partition), so
each key's changes stay in one partition, in order. Followers read the partitions side by side. A primary-key
update is a delete of the old key and a create of the new one, in two partitions as often as not: the two are
different keys, and each store must still end with the new row and without the old.

A writer runs inserts, updates of one column (the wide one left alone: Postgres keeps it out of line), deletes
and key updates (some back to a key deleted before) while ``bootstrap`` from the topics fills each of the three
followers, each streams on from there and one is reindexed; then every store must equal the source.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from cdcsync.connectors.topics import ensure_topics, topic_specs
from cdcsync.snapshot.bootstrap import bootstrap_from_topics
from cdcsync.snapshot.reindex import reindex
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.lag_report import LagReader
from cdcsync.sync.stream import checkpoint_dir, start_file, start_query
from tests.integration.followers import assert_first_batch_from, scenario
from tests.support import ENV, execute, in_background, uid

PARTITIONS = 4
TENANTS = ("acme", "globex", "initech", "umbrella")
ROWS = 600


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-partition-tests")
    yield session
    session.stop()


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java client's key hash), as an unsigned 32-bit number."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    whole = len(data) & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = len(data) - whole
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h = ((h ^ data[whole]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition the Java producer's built-in partitioner gives a record with this key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_murmur2_is_kafkas() -> None:
    """Known answers from Kafka's own ``UtilsTest.testMurmur2`` (signed there)."""
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}  # fmt: skip
    for data, signed in cases.items():
        assert murmur2(data) == signed & 0xFFFFFFFF, data


def wide() -> str:
    """6,000 characters that do not compress: Postgres stores them out of line (TOAST)."""
    return os.urandom(3000).hex()


def row_values(key: tuple[str, str], rng: random.Random) -> str:
    body = wide() if rng.random() < 0.25 else f"short {rng.randint(0, 999)}"
    return f"('{key[0]}', '{key[1]}', {rng.randint(0, 999)}, 'n{rng.randint(0, 99)}', '{body}')"


def new_key(rng: random.Random) -> tuple[str, str]:
    return rng.choice(TENANTS), str(uuid.UUID(int=rng.getrandbits(128), version=4))


def ddl(kind: str, t: str, keys: list[tuple[str, str]], rng: random.Random) -> list[str]:
    if kind == "postgres":
        create = f"CREATE TABLE {t} (tenant text, code uuid, qty int NOT NULL, note text, body text, "
    else:
        create = f"CREATE TABLE {t} (tenant VARCHAR(20), code CHAR(36), qty INT, note VARCHAR(20), body MEDIUMTEXT, "
    rows = [row_values(k, rng) for k in keys]
    return [create + "PRIMARY KEY (tenant, code))"] + [
        f"INSERT INTO {t} VALUES {', '.join(rows[i : i + 100])}" for i in range(0, len(rows), 100)
    ]


@dataclass
class Writes:
    live: list[tuple[str, str]]
    dead: list[tuple[str, str]] = field(default_factory=list)  # keys deleted or moved away, free to come back
    done: Counter[str] = field(default_factory=Counter)
    moves: list[tuple[tuple[str, str], tuple[str, str]]] = field(default_factory=list)  # key updates: old -> new


@contextmanager
def mixed_writes(kind: str, t: str, writes: Writes, seed: int) -> Iterator[None]:
    """Transactions of 1-4 changes until the block ends: inserts, one-column updates, deletes, key updates."""
    rng = random.Random(seed)

    def where(key: tuple[str, str]) -> str:
        return f"tenant = '{key[0]}' AND code = '{key[1]}'"

    def take() -> tuple[str, str]:
        return writes.live.pop(rng.randrange(len(writes.live)))

    def transaction() -> None:
        statements = []
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.25 or len(writes.live) < 50:
                key = new_key(rng)
                statements.append(f"INSERT INTO {t} VALUES {row_values(key, rng)}")
                writes.live.append(key)
                writes.done["insert"] += 1
            elif roll < 0.5:  # the wide column left alone
                key = rng.choice(writes.live)
                statements.append(f"UPDATE {t} SET qty = qty + 1 WHERE {where(key)}")
                writes.done["update"] += 1
            elif roll < 0.6:
                key = rng.choice(writes.live)
                statements.append(f"UPDATE {t} SET note = 'u{rng.randint(0, 999)}' WHERE {where(key)}")
                writes.done["update"] += 1
            elif roll < 0.75:
                key = take()
                statements.append(f"DELETE FROM {t} WHERE {where(key)}")
                writes.dead.append(key)
                writes.done["delete"] += 1
            else:  # a key update, a third of them back to a key deleted before
                old = take()
                back = writes.dead and rng.random() < 0.33
                new = writes.dead.pop(rng.randrange(len(writes.dead))) if back else new_key(rng)
                statements.append(
                    f"UPDATE {t} SET tenant = '{new[0]}', code = '{new[1]}', qty = qty + 1 WHERE {where(old)}"
                )
                writes.live.append(new)
                writes.dead.append(old)
                writes.moves.append((old, new))
                writes.done["key update"] += 1
        execute(kind, *statements)

    with in_background(transaction, pause_s=0.01):
        yield


def raw_records(topic: str) -> dict[int, list[tuple[int, bytes, bytes | None]]]:
    """Every record of every partition of ``topic`` up to its end now: partition -> [(offset, key, value)]."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}", "group.id": f"test-{uid()}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        found: dict[int, list[tuple[int, bytes, bytes | None]]] = {p: [] for p in partitions}
        deadline = time.monotonic() + 60
        while any(ends[p] and (not found[p] or found[p][-1][0] < ends[p] - 1) for p in partitions):
            assert time.monotonic() < deadline, {p: (len(found[p]), ends[p]) for p in partitions}
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None and msg.offset() < ends[msg.partition()]:
                    found[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
        return found
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])  # MariaDB: make chaos
def test_four_partitions_bootstrap_and_stream_under_key_updates(spark: Any, tmp_path: Path, kind: str) -> None:
    rng = random.Random(7)
    t = f"parts_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    writes = Writes(live=[new_key(rng) for _ in range(ROWS)])
    options = {"topic_partitions": PARTITIONS}
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, {kind: ddl(kind, t, writes.live, rng)},
                  source_options=options) as sc:  # fmt: skip
        source = sc.config.sources[0]
        topic = source.topic(next(x for x in source.tables if x.table == t))
        # The writer's first transaction is the first the new connector streams after its snapshot: its changes
        # rank above the snapshot rows found before them in each one's partition (cdcsync.resolvers.SnapshotLsns).
        with mixed_writes(kind, t, writes, seed=11):
            time.sleep(2)
            for cfg in sc.config.followers:  # (a) each follower bootstrapped from the topics while the writer runs
                follower = build_follower(sc.config, cfg, spark)
                summary = bootstrap_from_topics(
                    sc.config, cfg, follower, checkpoint_dir(sc.config, cfg), base_dir(sc.config)
                )
                assert summary.records >= ROWS and summary.dead_lettered == 0, summary
                recorded = json.loads(start_file(base_dir(sc.config), cfg.name).read_text())["offsets"]
                assert sorted(recorded[topic]) == [str(p) for p in range(PARTITIONS)], recorded
                # The stream's first batch starts at the offsets the bootstrap recorded, in every partition.
                query = start_query(spark, sc.config, cfg, follower, once=True)
                query.awaitTermination(600)
                assert query.exception() is None, query.exception()
                assert_first_batch_from(sc.config, cfg, follower, query, recorded)
                sc.followers[cfg.name] = follower  # (b) and it streams on from there, below
            # A reindex (Redis: the quickest store to rebuild) aligns on every partition too, writes still running.
            rebuilt = reindex(sc.config, next(c for c in sc.config.followers if c.name == "cache"), spark)
            assert rebuilt.fill.dead_lettered == 0 and rebuilt.catch_up.dead_lettered == 0, rebuilt.as_json()
            for offsets in rebuilt.offsets.values():
                assert sorted(offsets[topic]) == [str(p) for p in range(PARTITIONS)], rebuilt.offsets
        sc.run_once()
        sc.assert_converged()

        assert min(writes.done[op] for op in ("insert", "update", "delete", "key update")) >= 20, writes.done
        records = raw_records(topic)
        assert len(records) == PARTITIONS
        counts = {p: len(rs) for p, rs in records.items()}
        total = sum(counts.values())
        assert all(n >= total // (3 * PARTITIONS) for n in counts.values()), counts  # spread over every partition
        homes: dict[tuple[Any, ...], set[int]] = defaultdict(set)
        first_streamed = 0  # changes of the connector's first streamed transaction (no lastCommitLsn yet)
        for partition, rs in records.items():
            for _offset, key, value in rs:
                envelope = json.loads(value) if value is not None else {}
                sequence = str(envelope.get("source", {}).get("sequence"))
                first_streamed += envelope.get("op") in ("c", "u", "d") and sequence.startswith("[null")
                fields = json.loads(key)
                assert list(fields) == ["tenant", "code"], fields  # the primary key, and nothing else
                assert kafka_partition(key, PARTITIONS) == partition, (key, partition)
                homes[(fields["tenant"], fields["code"])].add(partition)
        assert all(len(home) == 1 for home in homes.values())  # a key's snapshot row and changes: one partition
        assert kind != "postgres" or first_streamed, "the writer's first transaction was not the first streamed"
        moved = [(old, new) for old, new in writes.moves if homes[old] != homes[new]]
        assert len(moved) >= 10, (len(moved), len(writes.moves))  # key updates that crossed partitions

        reader = LagReader(sc.config)
        try:
            report = reader.report()
        finally:
            reader.close()
        for lag in report.followers:
            table = next(x for x in lag.tables if x.topic == topic)
            assert [p.partition for p in table.partitions] == list(range(PARTITIONS)), lag.as_dict()
            assert table.offsets_behind == 0, lag.as_dict()
        # A config asking for another count: the existing topics are reported and left as they are.
        notes = ensure_topics(sc.config, topic_specs(source.model_copy(update={"topic_partitions": 2})))
        assert sum(f"has {PARTITIONS} partition(s), source {source.name} asks for 2" in n for n in notes) == 2, notes
