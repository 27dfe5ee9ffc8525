"""A batch written as several chunks at once (``sink.writers``) converges to each key's newest change.

Against the real Elasticsearch and Redis servers: a follower whose sink
takes small chunks processes one batch in which every key changes several
times, far apart, and some keys end deleted. Chunks of that batch land in
any order; the store must still hold each key's last change, and the counts
must add up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cdcsync.events import Record
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.follower import Follower
from cdcsync.sync.sink import Sink
from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
from cdcsync.sync.sinks.redis import RedisSink
from tests.integration.sinks.test_sink_errors import (
    ES_URL,
    KAFKA,
    MAPPING,
    REDIS_PORT,
    TOPIC,
    change_record,
    dead_letter_topic,
)
from tests.support import uid

KEYS, GROUP, ROUNDS, CHUNK = 60, 4, 5, 7


def batch() -> tuple[list[Record], dict[str, str]]:
    """Keys in groups of GROUP, each group's keys updated ROUNDS times in turn, then every fourth key deleted.

    With chunks of CHUNK records, a key's changes fall into neighbouring chunks, which are in flight together.
    """
    records, newest = [], {}
    for first in range(0, KEYS, GROUP):
        for r in range(ROUNDS):
            for key in range(first, first + GROUP):
                records.append(change_record(len(records), key, {"id": key, "name": f"round {r}"}))
                newest[str(key)] = f"round {r}"
            if r == ROUNDS - 1:
                for key in range(first, first + GROUP, 4):
                    records.append(change_record(len(records), key, None))
                    del newest[str(key)]
    return records, newest


def converges(sink: Sink, dlq: str) -> None:
    sink.chunk_rows = CHUNK  # one batch, dozens of chunks: several in flight at once
    assert sink.writers > 1
    follower = Follower("chunks-test", sink, {TOPIC: MAPPING}, DeadLetters({"bootstrap.servers": KAFKA}, dlq, "t"))
    records, newest = batch()
    counts = follower.process(0, records)
    assert counts.adds_up(), counts
    assert counts.records == len(records) and counts.dead_lettered == 0
    held = sink.held(MAPPING.target)
    assert {i: doc["name"] for i, (_v, doc) in held.items()} == newest


@pytest.fixture
def dlq() -> Iterator[str]:
    with dead_letter_topic() as topic:
        yield topic


def test_elasticsearch_holds_each_keys_newest_change(dlq: str) -> None:
    sink = ElasticsearchSink("es-chunks", ES_URL, index_prefix=f"cdcsync-test-{uid()}-")
    sink.open([MAPPING])
    try:
        converges(sink, dlq)
    finally:
        sink._client.indices.delete(index=f"{sink.alias(MAPPING.target)}-*")
        sink.close()


def test_redis_holds_each_keys_newest_change(dlq: str) -> None:
    prefix = f"cdcchunks{uid()}"
    sink = RedisSink("redis-chunks", f"redis://127.0.0.1:{REDIS_PORT}/0", prefix=prefix)
    sink.open([MAPPING])
    try:
        converges(sink, dlq)
    finally:
        sink.close()
        client = redis.Redis(port=REDIS_PORT)
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
