"""The Redis sink's publish makes the live keys equal the staged generation plus the follower's writes since.

Against the real local server, one key prefix per test, deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.sinks.redis import RedisSink
from tests.integration.sinks.test_redis_sink import REDIS_URL, delete, upsert
from tests.support import uid

ITEMS = [TableMapping("public.items", "items")]


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield conn
    conn.close()


@pytest.fixture
def prefix(client: redis.Redis) -> Iterator[str]:
    prefix = f"cdcgen{uid()}"
    yield prefix
    for glob in (":*", "~*"):
        for key in client.scan_iter(match=f"{prefix}{glob}", count=1000):
            client.delete(key)


def sink_for(prefix: str) -> RedisSink:
    sink = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    sink.open(ITEMS)
    return sink


def test_publish_drops_orphans_and_resets_markers_to_the_rebuilt_generation(prefix: str, client: redis.Redis) -> None:
    live = sink_for(prefix)  # the running follower
    live.write(
        1,
        [
            upsert("items", 1, 10, name="old mapping"),  # the staged generation has it, same version
            upsert("items", 2, 10, name="orphan"),  # its delete was compacted away: the source has no row 2
            delete("items", 3, 5),  # a marker the staged generation does not have
            delete("items", 4, 10**18),  # a marker with a wrong, huge version over a row the source has
        ],
    )
    reindex = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    reindex.stage(ITEMS)
    reindex.write(2, [upsert("items", 1, 10, title="new mapping"), upsert("items", 4, 20, name="back")])
    reindex.write(3, [delete("items", 6, 30)])
    reindex.publish()
    assert live.held("items") == {
        "1": (10, {"id": "1", "title": "new mapping"}),
        "4": (20, {"id": "4", "name": "back"}),
    }
    assert client.hgetall(live.marker_key("items")) == {"6": "30"}
    assert not list(client.scan_iter(match=f"{prefix}~*"))  # staged keys and journals are gone
    live.close()
    reindex.close()


def test_publish_keeps_what_the_running_follower_wrote_since_the_stage(prefix: str, client: redis.Redis) -> None:
    live = sink_for(prefix)
    live.write(1, [upsert("items", i, 10, name="before") for i in (1, 2, 3)])
    reindex = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    reindex.stage(ITEMS)
    reindex.write(2, [upsert("items", i, 15, name="rebuilt") for i in (1, 2, 3)])
    # Changes past the offsets the staged generation reaches, applied by the follower meanwhile.
    live.write(3, [upsert("items", 1, 40, name="newer"), delete("items", 2, 41), upsert("items", 9, 42, name="new")])
    live.write(4, [upsert("items", 3, 12, name="older than rebuilt")])
    reindex.publish()
    assert live.held("items") == {
        "1": (40, {"id": "1", "name": "newer"}),
        "3": (15, {"id": "3", "name": "rebuilt"}),
        "9": (42, {"id": "9", "name": "new"}),
    }
    assert client.hgetall(live.marker_key("items")) == {"2": "41"}
    # After the publish nothing is journaled any more.
    live.write(5, [upsert("items", 10, 50, name="later")])
    assert not list(client.scan_iter(match=f"{prefix}~*"))
    live.close()
    reindex.close()


def test_a_publish_of_thousands_of_keys_treats_each_like_the_few_above(prefix: str, client: redis.Redis) -> None:
    """Each pass runs its script on many ids per call and many calls per round trip: every id still gets its rule."""
    n = 2500  # several pipeline rounds of several script calls each, in both passes
    live = sink_for(prefix)
    live.write(1, [upsert("items", i, 10, name="old") for i in range(n)])  # every third one is an orphan
    live.write(2, [delete("items", i, 5) for i in range(n, n + 300)])  # markers the rebuild does not have
    reindex = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    reindex.stage(ITEMS)
    reindex.write(3, [upsert("items", i, 20, name="rebuilt") for i in range(n) if i % 3])
    reindex.write(4, [delete("items", i, 20) for i in range(n + 300, n + 600)])
    live.write(5, [upsert("items", i, 30, name="since") for i in range(0, n, 7)])  # journaled, newer
    reindex.publish()
    expected = {str(i): (20, {"id": str(i), "name": "rebuilt"}) for i in range(n) if i % 3}
    expected |= {str(i): (30, {"id": str(i), "name": "since"}) for i in range(0, n, 7)}
    assert live.held("items") == expected
    assert client.hgetall(live.marker_key("items")) == {str(i): "20" for i in range(n + 300, n + 600)}
    assert not list(client.scan_iter(match=f"{prefix}~*"))
    live.close()
    reindex.close()


def test_a_new_stage_drops_the_journal_and_generation_of_a_killed_one(prefix: str, client: redis.Redis) -> None:
    live = sink_for(prefix)
    killed = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    killed.stage(ITEMS)
    killed.write(1, [upsert("items", 1, 10, name="half")])
    live.write(2, [upsert("items", 7, 10, name="journaled")])
    assert client.smembers(live.journal_key("items")) == {"", "7"}
    again = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    again.stage(ITEMS)
    assert client.smembers(live.journal_key("items")) == {""}  # a fresh journal, the killed generation gone
    assert [k for k in client.scan_iter(match=f"{prefix}~*") if "written" not in k] == []
    for sink in (live, killed, again):
        sink.close()


def test_a_publish_finds_keys_whose_ids_hold_glob_characters(prefix: str, client: redis.Redis) -> None:
    """The server scans with a pattern of the key head: an id's own ``*``, ``[``, ``?``, ``\\`` or ``:`` is not
    part of it, and a target whose name starts like another's is not scanned with it."""
    odd = ["a*b", "[x]", "q?", "c:d", "e\\f", "plain"]
    mappings = [*ITEMS, TableMapping("public.items_more", "items_more")]
    live = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    live.open(mappings)
    live.write(1, [upsert("items", i, 10, name="old") for i in odd] + [upsert("items_more", "a*b", 10, name="other")])
    reindex = RedisSink("redis-test", REDIS_URL, prefix=prefix)
    reindex.stage(ITEMS)
    reindex.write(2, [upsert("items", i, 20, name="rebuilt") for i in odd[:3]])
    reindex.publish()
    assert live.held("items") == {i: (20, {"id": i, "name": "rebuilt"}) for i in odd[:3]}
    assert live.held("items_more") == {"a*b": (10, {"id": "a*b", "name": "other"})}
    assert not list(client.scan_iter(match=f"{prefix}~*"))
    live.close()
    reindex.close()
