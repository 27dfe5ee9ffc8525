"""Server errors that are not about one row never reject it: the real servers, made to refuse writes.

A rejected row goes to the dead-letter topic and its offset commits, so an
error about the server rather than the row must stop the batch instead
(issue 11). Each test refuses writes in a way that touches only what it owns
(its own index, its own ACL user) or, for NOREPLICAS, changes one server
setting for the length of one write and restores the value it read first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from confluent_kafka.admin import AdminClient, NewTopic
from elasticsearch import Elasticsearch

from cdcsync.errors import FatalError, RetryableError, TableError
from cdcsync.events import Change, Record
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sink import Sink
from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
from cdcsync.sync.sinks.redis import RedisSink
from tests.support import ENV, end_offset, uid

ES_URL = f"http://127.0.0.1:{ENV['ES_PORT']}"
REDIS_PORT = int(ENV["REDIS_PORT"])
KAFKA = f"127.0.0.1:{ENV['KAFKA_PORT']}"
TOPIC = "test.public.items"  # the records' topic: only a key of the follower's mappings, never created
MAPPING = TableMapping("public.items", "items")


def upsert(doc_id: int, version: int, **fields: Any) -> Row:
    doc = {"id": doc_id, **fields}
    change = Change("test", "public.items", "u", {"id": doc_id}, doc, None, version, TOPIC, 0, version)
    return Row(change, "items", str(doc_id), doc)


def record(offset: int, doc_id: int, name: str) -> Record:
    """A Debezium Postgres update, as the follower reads it from Kafka."""
    return change_record(offset, doc_id, {"id": doc_id, "name": name})


def change_record(offset: int, key: int, after: dict[str, Any] | None, table: str = "items") -> Record:
    """A Debezium Postgres update of row ``key`` (a delete when ``after`` is None); a later offset is newer."""
    envelope = {
        "before": None if after else {"id": key},
        "after": after,
        "source": {
            "connector": "postgresql",
            "name": "test",
            "schema": "public",
            "table": table,
            "ts_ms": 1_709_207_130_000,
            "sequence": f'["{1000 + offset}","{1100 + offset}"]',
        },
        "transaction": {"total_order": offset + 1},
        "op": "u" if after else "d",
    }
    topic = TOPIC.replace("items", table)
    return Record(topic, 0, offset, json.dumps({"id": key}).encode(), json.dumps(envelope).encode())


def batch(n: int) -> list[Record]:
    return [record(i, i, f"name {i}") for i in range(n)]


@contextmanager
def dead_letter_topic() -> Iterator[str]:
    admin = AdminClient({"bootstrap.servers": KAFKA})
    topic = f"dlq.test-{uid()}"
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    try:
        yield topic
    finally:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)


def follower(sink: Sink, topic: str) -> Follower:
    # One attempt: a RetryableError fails the batch at once (the daemon's supervisor would restart it later).
    return Follower(
        "errors-test",
        sink,
        {TOPIC: MAPPING},
        DeadLetters({"bootstrap.servers": KAFKA}, topic, "errors-test"),
        max_attempts=1,
    )


def assert_dead_letters_add_up(counts: BatchCounts, topic: str, rows: int) -> None:
    """The batch after the fault: every row applied, the poison record alone dead-lettered, counts adding up."""
    assert counts.adds_up(), counts
    assert (counts.records, counts.applied, counts.dead_lettered) == (rows + 1, rows, 1)
    assert end_offset(topic) == 1  # the failed batch sent nothing to the dead letters


def poison(offset: int) -> Record:
    return Record(TOPIC, 0, offset, None, b"{}")  # no key: dead-lettered while parsing


# --------------------------------------------------------------------------- Elasticsearch


@pytest.fixture
def es_sink(es: Elasticsearch) -> Iterator[ElasticsearchSink]:
    prefix = f"cdcsync-test-{uid()}-"
    sink = ElasticsearchSink("es-errors", ES_URL, index_prefix=prefix)
    sink.open([MAPPING])
    yield sink
    sink.close()
    names = list(es.indices.get(index=f"{prefix}*", expand_wildcards="open,closed"))
    if names:  # a closed index is deleted like an open one
        es.indices.delete(index=",".join(names))


def physical(es: Elasticsearch, sink: ElasticsearchSink) -> str:
    (index,) = es.indices.get_alias(name=sink.alias("items"))
    return str(index)


def reopen(es: Elasticsearch, index: str) -> None:
    es.indices.open(index=index)
    es.cluster.health(index=index, wait_for_status="green", timeout="30s")


def test_a_closed_index_rejects_no_row_and_the_write_applies_once_it_is_reopened(
    es: Elasticsearch, es_sink: ElasticsearchSink
) -> None:
    assert es_sink.write(1, [upsert(1, 10, name="before")]).applied == 1
    index = physical(es, es_sink)
    es.indices.close(index=index)
    rows = [upsert(1, 20, name="while closed"), upsert(2, 20, name="new")]
    with pytest.raises(TableError, match=rf"the index {index} is closed") as refused:  # a RetryableError
        es_sink.write(2, rows)
    assert refused.value.target == "items" and f"POST {index}/_open" in refused.value.fix
    reopen(es, index)
    result = es_sink.write(2, rows)  # the follower's retry of the same batch
    assert (result.applied, result.older, result.rejected) == (2, 0, [])
    assert es_sink.held("items") == {
        "1": (20, {"id": 1, "name": "while closed"}),
        "2": (20, {"id": 2, "name": "new"}),
    }


def test_the_follower_dead_letters_nothing_while_the_index_is_closed(
    es: Elasticsearch, es_sink: ElasticsearchSink
) -> None:
    index = physical(es, es_sink)
    with dead_letter_topic() as topic:
        run = follower(es_sink, topic)
        es.indices.close(index=index)
        held = run.process(1, batch(3))  # the table's rows are held, for the batch's caller to retry (sync.held)
        assert (held.held, held.applied, held.dead_lettered) == (3, 0, 0) and held.adds_up()
        [(reason, fix)] = held.held_tables.values()
        assert f"the index {index} is closed" in reason and f"POST {index}/_open" in fix
        run.dead_letters.flush()
        reopen(es, index)
        counts = run.process(1, [*batch(3), poison(3)])  # Spark replays the batch: its offsets never committed
        assert_dead_letters_add_up(counts, topic, rows=3)
    assert set(es_sink.held("items")) == {"0", "1", "2"}


# --------------------------------------------------------------------------- Redis


@pytest.fixture
def admin() -> Iterator[redis.Redis]:
    conn = redis.Redis(port=REDIS_PORT, decode_responses=True)
    yield conn
    conn.close()


@contextmanager
def redis_sink(admin: redis.Redis, url: str | None = None, prefix: str | None = None) -> Iterator[RedisSink]:
    sink = RedisSink("redis-errors", url or f"redis://127.0.0.1:{REDIS_PORT}/0", prefix=prefix or f"cdctest{uid()}")
    try:
        yield sink
    finally:
        sink.close()
        keys = list(admin.scan_iter(match=f"{sink.prefix}:*", count=1000))
        if keys:
            admin.delete(*keys)


@contextmanager
def user_without_hset(admin: redis.Redis) -> Iterator[str]:
    """A Redis URL for a new ACL user that may run every command but HSET; the user is deleted after."""
    user, password = f"cdctest-{uid()}", uid()
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all", "-hset")
    try:
        yield f"redis://{user}:{password}@127.0.0.1:{REDIS_PORT}/0"
    finally:
        admin.execute_command("ACL", "DELUSER", user)


def test_an_acl_refusal_inside_the_script_rejects_no_row_and_names_the_fix(admin: redis.Redis) -> None:
    # Redis 7.0 answers it with no error code: "The user executing the script can't run this command ...".
    with user_without_hset(admin) as url, redis_sink(admin, url) as sink:
        sink.open([MAPPING])
        rows = [upsert(i, 10, name=f"n{i}") for i in range(3)]
        with pytest.raises(FatalError, match="ACL SETUSER"):
            sink.write(1, rows)
        user = url.split("//", 1)[1].split(":", 1)[0]
        admin.execute_command("ACL", "SETUSER", user, "+hset")
        result = sink.write(1, rows)
        assert (result.applied, result.older, result.rejected) == (3, 0, [])


def test_noreplicas_rejects_no_row_and_is_retryable(admin: redis.Redis) -> None:
    with redis_sink(admin) as sink:
        sink.open([MAPPING])
        rows = [upsert(i, 10, name=f"n{i}") for i in range(3)]
        original = admin.config_get("min-replicas-to-write")["min-replicas-to-write"]
        try:
            admin.config_set("min-replicas-to-write", 1)  # no replica here: every write answers NOREPLICAS
            with pytest.raises(RetryableError, match="NOREPLICAS"):
                sink.write(1, rows)
        finally:
            admin.config_set("min-replicas-to-write", original)
        assert admin.config_get("min-replicas-to-write")["min-replicas-to-write"] == original
        result = sink.write(1, rows)
        assert (result.applied, result.older, result.rejected) == (3, 0, [])


def test_the_follower_dead_letters_nothing_when_redis_refuses_the_script_a_command(admin: redis.Redis) -> None:
    with user_without_hset(admin) as url, redis_sink(admin, url) as sink, dead_letter_topic() as topic:
        sink.open([MAPPING])
        run = follower(sink, topic)
        with pytest.raises(FatalError, match="ACL SETUSER"):
            run.process(1, batch(3))
        run.dead_letters.flush()
        admin.execute_command("ACL", "SETUSER", url.split("//", 1)[1].split(":", 1)[0], "+hset")
        counts = run.process(1, [*batch(3), poison(3)])
        assert_dead_letters_add_up(counts, topic, rows=3)
        assert set(sink.held("items")) == {"0", "1", "2"}


def test_keys_one_table_s_acl_leaves_out_hold_that_table_alone_and_the_others_apply(admin: redis.Redis) -> None:
    """A Redis user granted one table's keys: the other table's rows are held with the grant to make, none is
    dead-lettered, and once the keys are granted the same records apply."""
    user, password, prefix = f"cdctest-{uid()}", uid(), f"cdctest{uid()}"
    items = (f"~{prefix}:items:*", f"~{prefix}:_deleted:items", f"~{prefix}~written:items")
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", *items, "+@all")
    other_topic = "test.public.other"
    url = f"redis://{user}:{password}@127.0.0.1:{REDIS_PORT}/0"
    try:
        with redis_sink(admin, url, prefix) as sink, dead_letter_topic() as topic:
            run = follower(sink, topic)
            run.mappings[other_topic] = TableMapping("public.other", "other")
            sink.open(list(run.mappings.values()))
            records = [*batch(3), *(change_record(3 + i, i, {"id": i}, "other") for i in range(2))]
            counts = run.process(1, records)
            # The items call ran in the round the other's failed: written again after, those count as older.
            written = counts.applied + counts.older
            assert (written, counts.held, counts.dead_lettered) == (3, 2, 0) and counts.adds_up(), counts
            assert set(sink.held("items")) == {"0", "1", "2"} and sink.held("other") == {}
            [(reason, fix)] = counts.held_tables.values()
            assert "refused the keys of target other" in reason and f"~{prefix}:other:*" in fix, (reason, fix)
            admin.execute_command("ACL", "SETUSER", user, f"~{prefix}:other:*", f"~{prefix}:_deleted:other",
                                  f"~{prefix}~written:other")  # fmt: skip
            counts = run.process(1, records)  # the held range, replayed
            assert (counts.older, counts.applied, counts.held) == (3, 2, 0) and counts.adds_up(), counts
            assert set(sink.held("other")) == {"0", "1"} and end_offset(topic) == 0
    finally:
        admin.execute_command("ACL", "DELUSER", user)


# --------------------------------------------------------------------------- dead letters


def test_more_dead_letters_in_one_batch_than_the_producer_queues_all_reach_the_topic() -> None:
    """A long run of poison records (a replay's call spans 50,000 records) outgrows the producer's own queue.

    librdkafka queues at most ``queue.buffering.max.messages`` (100,000 by
    default) and ``queue.buffering.max.kbytes`` undelivered records; past that
    ``produce`` raises ``BufferError``. Lowered here to 20 so 200 poison
    records outgrow it: each must still reach the dead-letter topic, and the
    batch's counts add up.
    """
    with dead_letter_topic() as topic:
        letters = DeadLetters({"bootstrap.servers": KAFKA, "queue.buffering.max.messages": "20"}, topic, "errors-test")
        for offset in range(200):
            letters.send(poison(offset), "parse", "a record without a key")
        letters.flush()
        assert end_offset(topic) == 200
