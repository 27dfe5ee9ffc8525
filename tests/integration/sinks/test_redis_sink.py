"""The Redis sink against the real local server: apply rule, delete markers, rejected rows, batch size.

Each test gets its own key prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from datetime import time as time_of_day
from decimal import Decimal
from typing import Any

import pytest
import redis

from cdcsync.errors import FatalError
from cdcsync.events import Change
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sinks.redis import RedisSink
from tests.support import ENV, uid

REDIS_URL = f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0"


def upsert(target: str, doc_id: int | str, version: int, **fields: Any) -> Row:
    doc = {"id": doc_id, **fields}
    change = Change("test", "public.items", "u", {"id": doc_id}, doc, None, version, "topic", 0, version)
    return Row(change, target, str(doc_id), doc)


def delete(target: str, doc_id: int, version: int) -> Row:
    change = Change("test", "public.items", "d", {"id": doc_id}, None, None, version, "topic", 0, version)
    return Row(change, target, str(doc_id), None)


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield conn
    conn.close()


@pytest.fixture
def sink(client: redis.Redis) -> Iterator[RedisSink]:
    sink = RedisSink("redis-test", REDIS_URL, prefix=f"cdctest{uid()}")
    sink.open([TableMapping("public.items", "items")])
    yield sink
    sink.close()
    keys = [k for glob in (":*", "~*") for k in client.scan_iter(match=f"{sink.prefix}{glob}", count=1000)]
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


def test_upsert_reads_back_as_its_stored_form(sink: RedisSink, client: redis.Redis) -> None:
    doc = {
        "name": "item",
        "price": Decimal("12.50"),
        "born": date(2024, 2, 29),
        "at": datetime(2024, 2, 29, 11, 45, 30, 123456, tzinfo=UTC),
        "opens": time_of_day(13, 45, 30),
        "meta": {"b": [1, 2], "a": None},
        "blob": b"\x00\xffbytes",
        "ok": True,
        "off": False,
        "n": 2**40,
        "ratio": 0.1,
        "ref": str(uuid.UUID(int=7)),
        "missing": None,
    }
    rows = [upsert("items", i, 100 + i, **doc) for i in range(3)]
    result = sink.write(1, rows)
    assert (result.applied, result.older, result.rejected) == (3, 0, [])
    assert sink.held("items") == {row.doc_id: (row.version, sink.stored_form(row.doc or {})) for row in rows}
    stored = client.hgetall(sink.row_key("items", "1"))
    assert stored == {
        "_v": "101",
        "id": "1",
        "name": "item",
        "price": "12.50",
        "born": "2024-02-29",
        "at": "2024-02-29T11:45:30.123456+00:00",
        "opens": "13:45:30",
        "meta": '{"a":null,"b":[1,2]}',
        "blob": "AP9ieXRlcw==",
        "ok": "true",
        "off": "false",
        "n": str(2**40),
        "ratio": "0.1",
        "ref": str(uuid.UUID(int=7)),
    }


def test_one_write_of_interleaved_targets_applies_each_in_its_own_target(sink: RedisSink, client: redis.Redis) -> None:
    # Script calls are one target's rows each (the call names its marker hash and journal once): rows of
    # two targets interleaved, with deletes, an empty document and a refused row, land where they belong.
    sink.open([TableMapping("public.orders", "orders")])
    client.set(sink.row_key("orders", "3"), "not a hash")
    sink.write(1, [upsert("items", 2, 5, name="old"), upsert("orders", 2, 5, total="1")])
    rows = []
    for i in range(1, 251):
        rows.append(upsert("items", i, 10, name=f"i{i}"))
        rows.append(delete("orders", i, 10) if i % 2 == 0 else upsert("orders", i, 10, total=str(i)))
    rows.append(Row(upsert("items", 0, 10).change, "items", "0", {}))
    result = sink.write(2, rows)
    assert (result.applied, result.older) == (501 - 1, 0)
    assert [row.doc_id for row, _ in result.rejected] == ["3"] and "WRONGTYPE" in result.rejected[0][1]
    items, orders = sink.held("items"), sink.held("orders")
    assert items == {str(i): (10, {"id": str(i), "name": f"i{i}"}) for i in range(1, 251)} | {"0": (10, {})}
    assert orders == {str(i): (10, {"id": str(i), "total": str(i)}) for i in range(1, 251, 2) if i != 3}
    assert client.hgetall(sink.marker_key("orders")) == {str(i): "10" for i in range(2, 251, 2)}
    assert not client.exists(sink.marker_key("items"))


def test_versions_compare_exactly_beyond_double_precision(sink: RedisSink) -> None:
    big = 2**60  # big + 1 and big + 2 are the same Lua number (double)
    assert sink.write(1, [upsert("items", 1, big + 1, name="first")]).applied == 1
    assert sink.write(2, [upsert("items", 1, big + 2, name="second")]).applied == 1
    assert sink.write(3, [upsert("items", 1, big + 1, name="first again")]).older == 1
    assert sink.write(4, [upsert("items", 2, 9, name="nine")]).applied == 1
    assert sink.write(5, [upsert("items", 2, 10, name="ten")]).applied == 1  # longer string, larger number
    assert sink.write(6, [upsert("items", 2, 9, name="nine")]).older == 1
    held = sink.held("items")
    assert held["1"] == (big + 2, {"id": "1", "name": "second"}) and held["2"][0] == 10


def test_an_upsert_replaces_the_whole_hash(sink: RedisSink, client: redis.Redis) -> None:
    sink.write(1, [upsert("items", 1, 10, name="a", dropped="soon gone", nullable="x")])
    sink.write(2, [upsert("items", 1, 11, name="b", nullable=None)])
    assert client.hgetall(sink.row_key("items", "1")) == {"_v": "11", "id": "1", "name": "b"}


def test_delete_removes_the_row_and_a_replayed_older_write_does_not_resurrect_it(
    sink: RedisSink, client: redis.Redis
) -> None:
    sink.write(1, [upsert("items", 1, 10, name="a"), upsert("items", 2, 10, name="b")])
    assert sink.write(2, [delete("items", 1, 20)]).applied == 1
    assert not client.exists(sink.row_key("items", "1"))
    assert client.hget(sink.marker_key("items"), "1") == "20"
    assert set(sink.held("items")) == {"2"}
    replay = sink.write(3, [upsert("items", 1, 10, name="a"), delete("items", 1, 20)])
    assert (replay.applied, replay.older) == (0, 2)
    assert not client.exists(sink.row_key("items", "1"))
    assert set(sink.held("items")) == {"2"}


def test_a_delete_of_a_row_never_seen_still_beats_its_older_snapshot(sink: RedisSink, client: redis.Redis) -> None:
    assert sink.write(1, [delete("items", 9, 50)]).applied == 1
    assert sink.write(2, [upsert("items", 9, 0, name="snapshot row")]).older == 1
    assert sink.write(3, [upsert("items", 8, 0, name="snapshot row")]).applied == 1  # version 0 is valid
    assert not client.exists(sink.row_key("items", "9"))


def test_a_newer_upsert_after_a_delete_brings_the_row_back(sink: RedisSink, client: redis.Redis) -> None:
    sink.write(1, [upsert("items", 1, 10, name="a")])
    sink.write(2, [delete("items", 1, 20)])
    assert sink.write(3, [upsert("items", 1, 20, name="same version as the delete")]).older == 1
    assert sink.write(4, [upsert("items", 1, 30, name="back")]).applied == 1
    assert sink.held("items") == {"1": (30, {"id": "1", "name": "back"})}
    assert client.hget(sink.marker_key("items"), "1") is None  # the row's _v now holds the version


def test_a_row_redis_refuses_is_rejected_and_the_rest_applied(sink: RedisSink, client: redis.Redis) -> None:
    client.set(sink.row_key("items", "2"), "not a hash")
    rows = [upsert("items", 1, 10, name="a"), upsert("items", 2, 10, name="b"), upsert("items", 3, 10, _v="x")]
    rows.append(upsert("items", 4, 10, name="d"))
    result = sink.write(1, rows)
    assert (result.applied, result.older) == (2, 0)
    reasons = {row.doc_id: reason for row, reason in result.rejected}
    assert set(reasons) == {"2", "3"}
    assert "WRONGTYPE" in reasons["2"] and "'_v'" in reasons["3"]
    assert set(sink.held("items")) == {"1", "4"}


def test_a_refused_row_among_many_is_rejected_alone(sink: RedisSink, client: redis.Redis) -> None:
    client.set(sink.row_key("items", "5"), "not a hash")
    client.set(sink.marker_key("other"), "not a hash either")  # every row of target "other" is refused
    rows = [upsert("items", i, 10, name=f"n{i}") for i in range(10)]
    rows[3:3] = [upsert("other", 1, 10, name="x"), delete("other", 2, 10)]
    result = sink.write(1, rows)
    assert (result.applied, result.older) == (9, 0)
    assert sorted((row.target, row.doc_id) for row, _ in result.rejected) == [
        ("items", "5"),
        ("other", "1"),
        ("other", "2"),
    ]
    assert all("WRONGTYPE" in reason for _, reason in result.rejected)
    assert set(sink.held("items")) == {str(i) for i in range(10)} - {"5"}
    assert client.get(sink.row_key("items", "5")) == "not a hash"


def test_upserts_deletes_and_older_rows_in_one_batch_are_counted_exactly(sink: RedisSink, client: redis.Redis) -> None:
    sink.write(1, [upsert("items", i, 10, name=f"old {i}") for i in range(1, 5)] + [delete("items", 5, 10)])
    result = sink.write(
        2,
        [
            upsert("items", 1, 20, name="newer"),  # applied
            upsert("items", 2, 10, name="same version"),  # older
            delete("items", 3, 20),  # applied: the row goes
            delete("items", 4, 5),  # older than the row
            upsert("items", 5, 9, name="older than its delete"),  # older
            upsert("items", 6, 1, name="new row"),  # applied
            delete("items", 7, 1),  # applied: a delete of a row never seen leaves its marker
            upsert("items", 8, 1, _v="collides"),  # rejected before the server
        ],
    )
    assert (result.applied, result.older, [row.doc_id for row, _ in result.rejected]) == (4, 3, ["8"])
    assert sink.held("items") == {
        "1": (20, {"id": "1", "name": "newer"}),
        "2": (10, {"id": "2", "name": "old 2"}),
        "4": (10, {"id": "4", "name": "old 4"}),
        "6": (1, {"id": "6", "name": "new row"}),
    }
    assert client.hgetall(sink.marker_key("items")) == {"3": "20", "5": "10", "7": "1"}


def test_interleaved_outcomes_over_thousands_of_rows_map_to_their_rows(sink: RedisSink) -> None:
    # Every third row is older and every third a delete, so an answer attributed to the wrong row shows.
    sink.write(1, [upsert("items", i, 100, name=f"first {i}") for i in range(2500)])
    rows = [
        upsert("items", i, 200, name=f"second {i}")
        if i % 3 == 0
        else upsert("items", i, 50, name="older")
        if i % 3 == 1
        else delete("items", i, 200)
        for i in range(2500)
    ]
    result = sink.write(2, rows)
    assert (result.applied, result.older, result.rejected) == (1667, 833, [])
    held = sink.held("items")
    assert set(held) == {str(i) for i in range(2500) if i % 3 != 2}
    assert all(held[str(i)] == (200, {"id": str(i), "name": f"second {i}"}) for i in range(0, 2500, 3))
    assert all(held[str(i)] == (100, {"id": str(i), "name": f"first {i}"}) for i in range(1, 2500, 3))


def test_a_row_with_more_fields_than_one_hset_takes_round_trips(sink: RedisSink) -> None:
    wide = {f"c{n}": f"v{n}" for n in range(5000)}  # 10,000 strings: beyond what Lua's unpack() takes at once
    rows = [upsert("items", 1, 10, name="a"), upsert("items", 2, 10, **wide), upsert("items", 3, 10, name="c")]
    result = sink.write(1, rows)
    assert (result.applied, result.older, result.rejected) == (3, 0, [])
    held = sink.held("items")
    assert held["2"] == (10, {"id": "2", **wide}) and set(held) == {"1", "2", "3"}


def test_a_script_failure_outside_any_command_rejects_only_its_row(
    sink: RedisSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_args = sink._script_args

    def corrupt(row: Row) -> tuple[str, bytes]:
        key, encoded = script_args(row)
        return key, (b"not json" if row.doc_id == "5" else encoded)  # cjson fails: the whole call errors

    monkeypatch.setattr(sink, "_script_args", corrupt)
    result = sink.write(1, [upsert("items", i, 10, name=f"n{i}") for i in range(10)])
    assert [row.doc_id for row, _ in result.rejected] == ["5"]
    assert result.applied + result.older == 9
    assert set(sink.held("items")) == {str(i) for i in range(10)} - {"5"}


def test_any_text_reaches_redis_byte_for_byte(sink: RedisSink, client: redis.Redis) -> None:
    odd = {"quote": 'a"b', "slash": "a\\b/c", "nul": "a\x00b", "lines": "a\nb\r\t", "accents": "é ü ß", "emoji": "😀"}
    odd |= {"sep": "a\u2028b", "číslo": "12", "digits": "00123", "big": str(2**80), "empty": ""}
    rows = [upsert("items", 1, 10, **odd), upsert("items", 2, 10, bad="\ud800"), upsert("items", 3, 10, name="c")]
    result = sink.write(1, rows)
    assert (result.applied, [row.doc_id for row, _ in result.rejected]) == (2, ["2"])
    assert "unicode" in result.rejected[0][1]
    assert client.hgetall(sink.row_key("items", "1")) == {"_v": "10", "id": "1", **odd}


def test_publish_promotes_the_staged_rows_and_markers_newer_than_the_live_ones(
    sink: RedisSink, client: redis.Redis
) -> None:
    sink.write(1, [upsert("items", 1, 10, name="live"), upsert("items", 2, 10, name="live"), delete("items", 3, 5)])
    sink.stage([TableMapping("public.items", "items")])
    staged = [upsert("items", i, 20, name="staged") for i in (1, 2)] + [upsert("items", 3, 6, name="staged")]
    result = sink.write(2, [*staged, delete("items", 4, 7)])
    assert (result.applied, result.older, result.rejected) == (4, 0, [])
    assert set(sink.held("items")) == {"1", "2", "3"}  # the staged generation, not the live rows
    # The running follower writes a newer version of row 2 meanwhile: the journal keeps it over the staged one.
    running = RedisSink("redis-test", REDIS_URL, prefix=sink.prefix)
    assert running.write(3, [upsert("items", 2, 30, name="live, newer")]).applied == 1
    running.close()
    sink.publish()
    assert sink.held("items") == {
        "1": (20, {"id": "1", "name": "staged"}),
        "2": (30, {"id": "2", "name": "live, newer"}),
        "3": (6, {"id": "3", "name": "staged"}),
    }
    assert client.hgetall(sink.marker_key("items")) == {"4": "7"}
    assert not list(client.scan_iter(match=f"{sink.prefix}~*"))


def test_the_script_is_reloaded_after_the_server_lost_it(sink: RedisSink, client: redis.Redis) -> None:
    client.script_flush()  # what a Redis restart does to the script cache
    result = sink.write(1, [upsert("items", i, 10, name="a") for i in range(3)])
    assert (result.applied, result.older) == (3, 0)


def test_held_reads_only_its_target(sink: RedisSink) -> None:
    sink.write(1, [upsert("items", 1, 10, name="a"), upsert("items2", 1, 10, name="b")])
    assert set(sink.held("items")) == {"1"} and set(sink.held("items2")) == {"1"}
    with pytest.raises(FatalError, match="target"):
        sink.write(2, [upsert("items:x", 1, 10, name="c")])
