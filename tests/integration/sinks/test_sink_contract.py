"""The sink contract, once, against each real store: the apply rule, redelivery, deletes, counts that add up.

What every sink promises (``cdcsync.sync.sink``): a row older than (or as old
as) the one held is ``older`` and changes nothing; a delete beats older writes,
even of a row it never saw; a redelivered batch is all ``older``; every row of
a write is applied, older or rejected, exactly once. Each store's own
behaviour (Elasticsearch's markers and aliases, Redis' hashes and journals,
Delta's MERGE and files) stays in its own test module.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcsync.errors import RetryableError
from cdcsync.events import Change
from cdcsync.sync.mapping import Row, TableMapping
from tests.support import ENV, uid

TYPES = {"id": "int", "n": "int", "name": "text", "price": "decimal"}
ES_URL = f"http://127.0.0.1:{ENV['ES_PORT']}"
REDIS_URL = f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0"


def upsert(doc_id: int, version: int, **fields: Any) -> Row:
    doc = {"id": doc_id, **fields}
    change = Change("test", "public.items", "u", {"id": doc_id}, doc, None, version, "topic", 0, version)
    return Row(change, "items", str(doc_id), doc)


def delete(doc_id: int, version: int) -> Row:
    change = Change("test", "public.items", "d", {"id": doc_id}, None, None, version, "topic", 0, version)
    return Row(change, "items", str(doc_id), None)


@dataclass
class Store:
    sink: Any
    refused: Callable[[int, int], Row]  # a row this store refuses (a value its mapping or script cannot take)

    def held_as(self, doc_id: int, version: int, **fields: Any) -> tuple[int, dict[str, Any]]:
        """What ``held`` gives for a row written as ``upsert(doc_id, version, **fields)``."""
        return version, self.sink.stored_form({"id": doc_id, **fields})


def elasticsearch_store() -> Iterator[Store]:
    from elasticsearch import Elasticsearch

    from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink

    prefix = f"cdcsync-contract-{uid()}-"
    sink = ElasticsearchSink("es-contract", ES_URL, index_prefix=prefix)
    sink.open([TableMapping("public.items", "items", types=TYPES)])
    yield Store(sink, lambda i, v: upsert(i, v, n="bad"))  # a long field
    sink.close()
    client = Elasticsearch(ES_URL, request_timeout=30)
    names = list(client.indices.get(index=f"{prefix}*"))
    if names:
        client.indices.delete(index=",".join(names))
    client.close()


def redis_store() -> Iterator[Store]:
    import redis

    from cdcsync.sync.sinks.redis import RedisSink

    sink = RedisSink("redis-contract", REDIS_URL, prefix=f"cdccontract{uid()}")
    sink.open([TableMapping("public.items", "items", types=TYPES)])
    yield Store(sink, lambda i, v: upsert(i, v, _v="bad"))  # the version field the apply script keeps
    sink.close()
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    keys = [k for glob in (":*", "~*") for k in client.scan_iter(match=f"{sink.prefix}{glob}", count=1000)]
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


def delta_store(tmp: Path) -> Iterator[Store]:
    from cdcsync.spark import spark_session
    from cdcsync.sync.sinks.delta import DeltaSink

    conf = {"spark.databricks.delta.snapshotPartitions": "2", "spark.sql.shuffle.partitions": "2"}
    spark = spark_session("cdcsync-test-delta-sink", conf=conf)  # the run's session (getOrCreate)
    sink = DeltaSink("delta-contract", spark, str(tmp / "lake"))
    sink.open([TableMapping("public.items", "items", types=TYPES)])
    yield Store(sink, lambda i, v: upsert(i, v, n="bad"))  # a BIGINT column
    sink.close()
    shutil.rmtree(tmp / "lake", ignore_errors=True)


STORES = {"elasticsearch": elasticsearch_store, "redis": redis_store}


@pytest.fixture(params=["elasticsearch", "redis", "delta"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = delta_store(tmp_path) if request.param == "delta" else STORES[request.param]()
    yield next(made)
    next(made, None)


def test_older_version_after_a_newer_one_is_older(store: Store) -> None:
    sink = store.sink
    assert sink.write(1, [upsert(1, 20, name="new")]).applied == 1
    result = sink.write(2, [upsert(1, 10, name="old")])
    assert (result.applied, result.older) == (0, 1)
    assert sink.held("items") == {"1": store.held_as(1, 20, name="new")}


def test_same_version_again_is_a_no_op(store: Store) -> None:
    sink = store.sink
    batch = [upsert(i, 7, name=f"v7-{i}") for i in range(5)]
    assert sink.write(1, batch).applied == 5
    again = sink.write(1, batch)  # the same batch redelivered after a crash
    assert (again.applied, again.older) == (0, 5)
    assert sink.write(2, [upsert(0, 7, name="same version, other content")]).older == 1
    assert sink.held("items")["0"] == store.held_as(0, 7, name="v7-0")


def test_a_delete_of_a_row_never_seen_still_beats_its_older_snapshot(store: Store) -> None:
    sink = store.sink
    assert sink.write(1, [delete(9, 50)]).applied == 1
    assert sink.write(2, [upsert(9, 0, name="snapshot row")]).older == 1
    assert sink.write(3, [upsert(8, 0, name="snapshot row")]).applied == 1  # version 0 is valid
    assert set(sink.held("items")) == {"8"}


def test_a_newer_upsert_after_a_delete_brings_the_row_back(store: Store) -> None:
    sink = store.sink
    sink.write(1, [upsert(1, 10, name="a")])
    sink.write(2, [delete(1, 20)])
    assert sink.write(3, [delete(1, 20)]).older == 1  # the delete redelivered
    assert sink.write(4, [upsert(1, 20, name="same version as the delete")]).older == 1
    assert sink.write(5, [upsert(1, 30, name="back")]).applied == 1
    assert sink.held("items") == {"1": store.held_as(1, 30, name="back")}


def test_a_few_thousand_rows_round_trip_and_every_row_is_counted_once(store: Store) -> None:
    sink = store.sink
    first = [upsert(i, 100, name=f"row {i}", n=i, price=Decimal(i) / 100) for i in range(3500)]
    result = sink.write(1, first)
    assert (result.applied, result.older, result.rejected) == (3500, 0, [])
    mixed = (
        first[:1000]  # redelivered: older
        + [upsert(i, 50, name="older") for i in range(1000, 1500)]  # older
        + [upsert(i, 200, name=f"newer {i}") for i in range(1500, 2500)]  # applied
        + [delete(i, 300) for i in range(2500, 3000)]  # applied
        + [store.refused(i, 200) for i in range(3000, 3010)]  # rejected
        + [upsert(i, 100, name="new row") for i in range(3500, 4000)]  # applied
    )
    result = sink.write(2, mixed)
    assert result.applied + result.older + len(result.rejected) == len(mixed)
    assert (result.applied, result.older, len(result.rejected)) == (2000, 1500, 10)
    held = sink.held("items")
    assert len(held) == 3500 - 500 + 500
    assert held["1700"] == store.held_as(1700, 200, name="newer 1700")
    assert held["42"] == (100, sink.stored_form(first[42].doc or {}))
    assert "2600" not in held and held["3005"][0] == 100


def test_lookup_reads_the_live_rows_of_the_ids_asked_for_as_scan_gives_them(store: Store) -> None:
    sink = store.sink
    sink.write(1, [upsert(i, 10, name=f"row {i}", n=i) for i in range(1500)])
    sink.write(2, [delete(7, 20), upsert(8, 30, name="newer")])
    asked = ["8", "7", "1499", "12", "no such id", "0", *map(str, range(100, 1300))]
    found = {ident: (version, doc) for ident, version, doc in sink.lookup("items", asked)}
    scanned = sink.held("items")
    assert set(found) == set(asked) - {"7", "no such id"}  # a deleted row and an unknown id are not there
    assert all(found[ident] == scanned[ident] for ident in found)
    assert found["8"] == store.held_as(8, 30, name="newer")
    assert list(sink.lookup("items", [])) == []


@pytest.mark.parametrize("kind", ["elasticsearch", "redis"])  # the stores cdcsync reaches over the network
def test_an_unreachable_server_is_retryable_and_named_without_its_password(kind: str) -> None:
    from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
    from cdcsync.sync.sinks.redis import RedisSink

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if kind == "elasticsearch":
        sink: Any = ElasticsearchSink("es-contract", f"http://user:secret@127.0.0.1:{port}", index_prefix="x-")
    else:
        sink = RedisSink("redis-contract", f"redis://:secret@127.0.0.1:{port}/0", prefix=f"cdccontract{uid()}")
    with pytest.raises(RetryableError) as caught:
        sink.write(1, [upsert(1, 10, name="a")])
    assert f"127.0.0.1:{port}" in str(caught.value) and "secret" not in str(caught.value)
    sink.close()
