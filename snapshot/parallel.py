"""Fill a store in several processes, for sinks whose apply rule ignores the order of writes.

Two users: a long replay of the log (``snapshot.replay``: each slice of
offsets is applied in one of the ``Processes``), and a large table read from
the source (``snapshot.table_copy``: each JDBC piece is mapped and written in
one of them).

``bootstrap --from topics`` and ``reindex`` parse, version and map every
record in Python, and one process does all of it under one GIL: at 300k
records into Elasticsearch its main thread was busy ~85 % of the time and the
machine a quarter idle (docs/performance.md, "Bootstrap from the topics in
several processes"). So when the follower's sink can share its fill
(``Sink.fill_order_free``: Elasticsearch and Redis, where the newest version
of a key wins whichever write lands last, and Delta, whose staged table is
loaded once from the files each process writes: ``delta_load``), a stretch of at least
``MIN_RECORDS`` offsets is cut into slices of offsets of one partition, and
``PROCESSES`` processes apply them, each with its own follower
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
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, NamedTuple

from cdcsync.config import Config
from cdcsync.errors import FatalError
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import TableMapping

PROCESSES = 2  # two cores: a third process measured no faster (docs/performance.md)
MIN_RECORDS = 200_000  # fewer records or rows: one process, no start-up (~1 s to spawn and import)


def shares(follower: Follower, records: int) -> bool:
    """Whether ``records`` records (or rows) into this follower go to several processes."""
    return PROCESSES > 1 and records >= max(1, MIN_RECORDS) and follower.sink.fill_order_free and not follower.on_driver


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
        assert follower.sink.fill_order_free  # the caller chose this path for such a sink (``shares``)
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
        except (BrokenProcessPool, OSError) as err:
            # A process that dies while the pool starts another one breaks the pool under that start: the
            # executor has closed its pipes, and the start fails with "handle is closed", not BrokenProcessPool.
            if isinstance(err, OSError) and not getattr(self._pool, "_broken", False):
                raise
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
    from cdcsync.sync.build import build_follower

    if setup.follower not in _followers:
        cfg = next(f for f in setup.config.followers if f.name == setup.follower)
        follower = build_follower(setup.config, cfg, None, mappings=dict(setup.mappings), open_sink=False, fill=True)
        follower.sink.take_over(setup.staged, list(setup.mappings.values()))  # where the caller's sink writes
        _followers[setup.follower] = follower
    return _followers[setup.follower]


def _ready(setup: Setup) -> None:
    follower_of(setup)
