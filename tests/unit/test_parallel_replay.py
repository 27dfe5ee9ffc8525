"""snapshot.replay.slices: a stretch of the log cut into even pieces that several processes share."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import TopicPartition

from cdcsync.snapshot import parallel, replay
from cdcsync.snapshot.replay import slices
from cdcsync.sync.sinks.redis import RedisSink


def covered(pieces: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], list[int]]:
    offsets: dict[tuple[str, int], list[int]] = {}
    for topic, partition, low, high in pieces:
        offsets.setdefault((topic, partition), []).extend(range(low, high))
    return offsets


def test_every_offset_once_in_order_per_partition() -> None:
    starts = {TopicPartition("a", 0): 10, TopicPartition("b", 1): 0}
    ends = {TopicPartition("a", 0): 1_010, TopicPartition("b", 1): 333}
    pieces = slices(starts, ends, most=200, ways=2)
    assert covered(pieces) == {("a", 0): list(range(10, 1_010)), ("b", 1): list(range(333))}
    assert all(high - low <= 200 for _t, _p, low, high in pieces)


def test_pieces_of_one_size_in_a_number_the_processes_share_evenly() -> None:
    # 300k offsets, at most 100k a piece, two processes: four of 75k, not three of 100k (one left alone at the end)
    pieces = slices({}, {TopicPartition("t", 0): 300_000}, most=100_000, ways=2)
    assert [(low, high) for _t, _p, low, high in pieces] == [(0, 75_000), (75_000, 150_000), (150_000, 225_000),
                                                             (225_000, 300_000)]  # fmt: skip


def test_an_empty_partition_has_no_piece() -> None:
    assert slices({TopicPartition("t", 0): 5}, {TopicPartition("t", 0): 5}, most=10, ways=2) == []


def test_only_a_long_stretch_into_a_sink_that_shares_its_fill_goes_to_several_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redis_follower = SimpleNamespace(sink=RedisSink("cache", "redis://127.0.0.1:1/0"), on_driver=False)  # no connection
    other = SimpleNamespace(sink=SimpleNamespace(fill_order_free=False), on_driver=False)  # a fill that stays in order
    documents = SimpleNamespace(sink=redis_follower.sink, on_driver=True)  # a follower whose state is a driver's file
    long = {TopicPartition("t", 0): parallel.MIN_RECORDS}
    assert replay.shared(redis_follower, {}, long)  # type: ignore[arg-type]
    assert not replay.shared(other, {}, long)  # type: ignore[arg-type]
    assert not replay.shared(documents, {}, long)  # type: ignore[arg-type]
    assert not replay.shared(redis_follower, {TopicPartition("t", 0): 1}, long)  # type: ignore[arg-type]
    monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
    assert not replay.shared(redis_follower, {}, {TopicPartition("t", 0): 0})  # type: ignore[arg-type]
    monkeypatch.setattr(parallel, "PROCESSES", 1)
    assert not replay.shared(redis_follower, {}, long)  # type: ignore[arg-type]
