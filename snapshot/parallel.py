"""Fill a store in several processes, for sinks whose apply rule ignores the order of writes.

Two users: a long replay of the log (below), and a large table read from the
source (``snapshot.source``: each JDBC piece is mapped and written in one of
the ``Processes``).

``bootstrap --from topics`` and ``reindex`` parse, version and map every
record in Python, and one process does all of it under one GIL: at 300k
records into Elasticsearch its main thread was busy ~85 % of the time and the
machine a quarter idle (docs/performance.md, "Bootstrap from the topics in
several processes"). So when the follower's sink can share its fill
(``Sink.order_free``: Elasticsearch and Redis, where the newest version
of a key wins whichever write lands last), a stretch of at least
``MIN_RECORDS`` offsets is cut into slices of ``SLICE_RECORDS`` offsets of one
partition, and ``PROCESSES`` processes apply them, each with its own follower
writing where the caller's sink writes (the staged generation, or the live
one after a reindex's publish).

The processes are spawned, not forked: none inherits the caller's threads,
Kafka clients or Spark gateway. A process killed mid-slice fails the replay
(``FatalError``), and so does any error of a slice, with its own message.
Each slice's counts come back to the caller, which adds them up (they must
add up, as in one process) and shows progress per slice. A process that meets a table whose shape changed learns it from
the catalog itself, as one process would; the caller then takes, per topic,
the shape learned in the latest slice, so what it remembers for the new store
is the log's last shape. The caller's bootstrap or reindex stops on a
failed replay as it would in one process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import TopicPartition

from cdcsync.config import Config
from cdcsync.errors import FatalError
from cdcsync.sync.follower import BatchCounts, Follower
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.sink import Generations

if TYPE_CHECKING:
    from cdcsync.snapshot.replay import Summary

PROCESSES = 2  # two cores: a third process measured no faster (docs/performance.md)
SLICE_RECORDS = 100_000  # offsets per slice: progress per slice, and the work spread evenly
MIN_RECORDS = 2 * SLICE_RECORDS  # fewer: one process, no start-up (~1 s to spawn and import)

Slice = tuple[str, int, int, int]  # topic, partition, first offset, end offset (excluded)


def shared(follower: Follower, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> bool:
    """Whether this stretch goes to several processes: a sink that can share its fill, and enough records."""
    return shares(follower, sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items()))


def shares(follower: Follower, records: int) -> bool:
    """Whether ``records`` records (or rows) into this follower go to several processes."""
    return PROCESSES > 1 and records >= max(1, MIN_RECORDS) and follower.sink.order_free


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
    pieces = slices(starts, ends, SLICE_RECORDS, PROCESSES)
    learned: dict[str, tuple[int, TableMapping]] = {}  # topic -> (start of the slice that saw it, its shape)
    with Processes(config, follower, len(pieces)) as processes:
        for future in as_completed([processes.submit(_apply, piece) for piece in pieces]):
            piece, counts, mapping = processes.result(future)
            summary.add(counts)
            handed(counts.records)
            topic, start = piece[0], piece[2]
            if mapping != follower.mappings[topic] and start >= learned.get(topic, (-1, mapping))[0]:
                learned[topic] = (start, mapping)
    for topic, (_start_offset, mapping) in learned.items():  # the store has it already: the processes told it
        follower.mappings[topic] = mapping


class Processes:
    """Up to ``PROCESSES`` spawned processes, each with a follower writing where the caller's follower's sink writes.

    ``submit(fn, *args)`` runs ``fn(setup, *args)`` in one of them (``fn``
    takes its follower from ``follower_of(setup)``); ``result`` waits for one
    such call. A process killed mid-call (out of memory) breaks the pool, and
    ``submit`` or ``result`` raises a ``FatalError`` naming the follower: ``multiprocessing.Pool``
    would wait for its call for ever. An error of a call comes back with it
    (no initializer: its errors are lost). Leaving the block waits for the
    calls running and cancels the rest; leaving it on an error kills them.
    """

    def __init__(self, config: Config, follower: Follower, calls: int) -> None:
        assert follower.sink.order_free  # the caller chose this path for such a sink (``shares``)
        self.name = follower.name
        self.setup = Setup(config, follower.name, dict(follower.mappings), follower.sink.generations.plain())
        self.ways = max(1, min(PROCESSES, calls))
        self._pool = ProcessPoolExecutor(self.ways, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        with self._loud():
            return self._pool.submit(fn, self.setup, *args)

    def warm(self) -> None:
        """Start every process and build its follower now, before the first call needs it."""
        for _ in range(self.ways):  # a call builds it in ~1 s, so the next call goes to the next process
            self.submit(_ready)  # an error here comes back again with the first real call

    def result(self, future: Future[Any]) -> Any:
        with self._loud():
            return future.result()

    @contextmanager
    def _loud(self) -> Iterator[None]:
        try:
            yield
        except BrokenProcessPool as err:
            raise FatalError(
                f"follower {self.name}: a replay process ended without finishing its work ({err}); "
                "out of memory? Run the command again"
            ) from None

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            # The work failed: stop the processes now. A process that a broken pool started while it was failing
            # the others is never told to stop, and shutdown would wait for it for ever (a test kills a process
            # the moment it starts). The executor has no public way to kill its processes.
            for process in list((getattr(self._pool, "_processes", None) or {}).values()):
                process.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)


class Setup(NamedTuple):
    """What a replay process needs to build its follower (sent with each slice; the first one builds it)."""

    config: Config
    follower: str
    mappings: dict[str, TableMapping]
    staged: dict[str, str]  # the caller's staged targets (``Generations.plain``)


_followers: dict[str, Follower] = {}  # in each replay process: its follower, built for its first slice


def follower_of(setup: Setup) -> Follower:
    """This process's follower for ``setup``, built by its first call."""
    from cdcsync.sync.stream import build_follower

    if setup.follower not in _followers:
        cfg = next(f for f in setup.config.followers if f.name == setup.follower)
        follower = build_follower(setup.config, cfg, None, mappings=dict(setup.mappings), open_sink=False, fill=True)
        follower.sink.generations = Generations(setup.staged)  # write where the caller's sink writes
        _followers[setup.follower] = follower
    return _followers[setup.follower]


def _ready(setup: Setup) -> None:
    follower_of(setup)


def _apply(setup: Setup, piece: Slice) -> tuple[Slice, BatchCounts, TableMapping]:
    """One slice through this process's follower, as ``snapshot.replay.replay`` applies a stretch in one process."""
    from cdcsync.snapshot.replay import REPLAY_CALL_RECORDS, replay_here

    topic, partition, start, end = piece
    follower = follower_of(setup)
    where, total = TopicPartition(topic, partition), BatchCounts()
    for counts in replay_here(setup.config, follower, {where: start}, {where: end}, REPLAY_CALL_RECORDS, print_nothing):
        total = total.merge(counts)
    return piece, total, follower.mappings[topic]


def print_nothing(records: int) -> None:
    """A slice's progress: the caller shows it per slice, from the counts."""
