"""Replay a long stretch of the log in several processes, for sinks whose apply rule ignores the order of writes.

``bootstrap --from topics`` and ``reindex`` parse, version and map every
record in Python, and one process does all of it under one GIL: at 300k
records into Elasticsearch its main thread was busy ~85 % of the time and the
machine a quarter idle (docs/performance.md, "Bootstrap from the topics in
several processes"). So when the follower's sink can share its fill
(``sync.sink.SharedFill``: Elasticsearch and Redis, where the newest version
of a key wins whichever write lands last), a stretch of at least
``MIN_RECORDS`` offsets is cut into slices of ``SLICE_RECORDS`` offsets of one
partition, and ``PROCESSES`` processes apply them, each with its own follower
writing where the caller's sink writes (the staged generation, or the live
one after a reindex's publish).

The processes are spawned, not forked: none inherits the caller's threads,
Kafka clients or Spark gateway. Each slice's counts come back to the caller,
which adds them up (they must add up, as in one process) and shows progress
per slice. A process that meets a table whose shape changed learns it from
the catalog itself, as one process would; the caller then takes, per topic,
the shape learned in the latest slice, so what it remembers for the new store
is the log's last shape. A failing slice fails the replay with its error; the
caller's bootstrap or reindex then stops as it would in one process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import TopicPartition

from cdcsync.sync.follower import BatchCounts, Follower
from cdcsync.sync.sink import SharedFill

if TYPE_CHECKING:
    from cdcsync.config import Config
    from cdcsync.snapshot.bootstrap import Summary
    from cdcsync.sync.mapping import TableMapping

PROCESSES = 2  # two cores: a third process measured no faster (docs/performance.md)
SLICE_RECORDS = 100_000  # offsets per slice: progress per slice, and the work spread evenly
MIN_RECORDS = 2 * SLICE_RECORDS  # fewer: one process, no start-up (~1 s to spawn and import)

Slice = tuple[str, int, int, int]  # topic, partition, first offset, end offset (excluded)


def shared(follower: Follower, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> bool:
    """Whether this stretch goes to several processes: a sink that can share its fill, and enough records."""
    records = sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items())
    return PROCESSES > 1 and records >= MIN_RECORDS and isinstance(follower.sink, SharedFill)


def slices(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], most: int, ways: int) -> list[Slice]:
    """Each partition's offsets from its start up to its end, in offset order, in pieces of at most ``most``.

    The pieces are of one size, in a number that ``ways`` processes share
    evenly: a last piece alone in one process while the others wait cost a
    third of a two-process replay of 300k records.
    """
    records = sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items())
    count = ways * max(1, -(-records // (ways * max(1, most))))
    size = max(1, -(-records // count))
    out: list[Slice] = []
    for tp, end in ends.items():
        for low in range(starts.get(tp, 0), end, size):
            out.append((tp.topic, tp.partition, low, min(end, low + size)))
    return out


def replay_shared(
    config: Config,
    follower: Follower,
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    summary: Summary,
    handed: Callable[[int], None],
) -> None:
    """Apply every record of the stretch in ``PROCESSES`` processes; ``summary`` gets each slice's counts."""
    sink = follower.sink
    assert isinstance(sink, SharedFill)  # shared() chose this path
    pieces = slices(starts, ends, SLICE_RECORDS, PROCESSES)
    learned: dict[str, tuple[int, TableMapping]] = {}  # topic -> (start of the slice that saw it, its shape)
    context = multiprocessing.get_context("spawn")
    setup = (config, follower.name, dict(follower.mappings), sink.generation())
    with context.Pool(min(PROCESSES, len(pieces)), initializer=_start, initargs=setup) as pool:
        for piece, counts, mapping in pool.imap_unordered(_apply, pieces):
            summary.add(counts)
            handed(counts.consumed)
            topic, start = piece[0], piece[2]
            if mapping != follower.mappings[topic] and start >= learned.get(topic, (-1, mapping))[0]:
                learned[topic] = (start, mapping)
    for topic, (_start_offset, mapping) in learned.items():  # the store has it already: the processes told it
        follower.mappings[topic] = mapping


_worker: dict[str, Any] = {}  # in each process: the config and its follower, made once by _start


def _start(config: Config, name: str, mappings: dict[str, TableMapping], generation: dict[str, Any]) -> None:
    from cdcsync.sync.stream import build_follower

    cfg = next(f for f in config.followers if f.name == name)
    follower = build_follower(config, cfg, None, mappings=mappings, open_sink=False, fill=True)
    sink = follower.sink
    assert isinstance(sink, SharedFill)
    sink.write_into(generation)
    _worker.update(config=config, follower=follower)


def _apply(piece: Slice) -> tuple[Slice, BatchCounts, TableMapping]:
    """One slice through this process's follower, as ``bootstrap.replay`` applies a stretch in one process."""
    from cdcsync.snapshot.bootstrap import REPLAY_CALL_RECORDS, consumer, read_window, runs

    topic, partition, start, end = piece
    follower: Follower = _worker["follower"]
    where = TopicPartition(topic, partition)
    total = BatchCounts()
    reader = consumer(_worker["config"], f"replay-{follower.name}")
    try:
        for records in runs(read_window(reader, {where: start}, {where: end}), REPLAY_CALL_RECORDS, lambda n: None):
            total = total.merge(follower.process(0, records))
    finally:
        reader.close()
    return piece, total, follower.mappings[topic]
