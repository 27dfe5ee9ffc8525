"""A table's rows from the source read's JDBC pieces to the follower's sink (``bootstrap --from source``).

Each piece is a ``pyarrow.Table`` of one JDBC query (``snapshot.jdbc``),
read at most a few pieces ahead of the one being written (``ReadAhead``).
Its rows take the read's versions (``versions_of``), are mapped as Debezium
would send them, and are written in chunks of BATCH_ROWS: in this process
(``copy_here``), or, for a large table into a sink that shares its fill, in
the processes of ``snapshot.parallel`` (``copy_in_processes``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcsync.config import TableRef
from cdcsync.events import Change, PoisonRecord, Record
from cdcsync.snapshot import jdbc, parallel
from cdcsync.snapshot.replay import BATCH_ROWS
from cdcsync.sources.snapshot import POSITION, Versions
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.chunks import snapshot_record
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import Row, TableMapping, canonical_doc, doc_id
from cdcsync.sync.values import convert

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Plan:
    """One followed table of a source: where to read it and how its rows map."""

    table: TableRef
    topic: str
    mapping: TableMapping
    rows: int = 0  # in the read's snapshot, counted once the read is open


class ReadAhead:
    """A table's JDBC pieces, read on the reader threads at most ``depth`` pieces ahead of the one being mapped.

    Submitting every piece at once read the whole table into memory whenever
    the store was slower than the reads.
    """

    def __init__(self, pool: ThreadPoolExecutor, pieces: list[jdbc.Piece], depth: int) -> None:
        self._pool, self._todo, self._depth = pool, deque(pieces), max(1, depth)
        self._running: deque[Future[pa.Table]] = deque()
        self._fill()

    def _fill(self) -> None:
        while self._todo and len(self._running) < self._depth:
            self._running.append(self._pool.submit(self._todo.popleft()))

    def __iter__(self) -> Iterator[pa.Table]:
        while self._running:
            table = self._running.popleft().result()
            self._fill()
            yield table


Chunk = tuple[list[Row], list[tuple[Record, str]]]  # rows mapped for the sink, and rows that could not be


def copy_here(
    source: str,
    plan: Plan,
    reads: Iterable[tuple[pa.Table, Versions]],
    follower: Follower,
    next_batch: Callable[[], int],
    add: Callable[[BatchCounts], None],
) -> None:
    """Stream one table from its JDBC read to the sink in this process, piece after piece.

    The table is read in pieces (key ranges or key hashes), each one JDBC
    query handed to Python as Arrow (``toArrow``: no per-row pickling on
    either side). Up to ``partitions`` pieces are read ahead (``ReadAhead``) while this
    thread maps the current one, and the follower's ``writers`` threads each write
    a chunk while it maps the next (``_write``): Spark's JDBC reads, this thread
    and the sink's server run side by side instead of taking turns. Pieces and
    chunks hold distinct keys, so their order does not matter.
    """
    chunks = (chunk for piece, versions in reads for chunk in _mapped(source, plan, piece, versions))
    _write(chunks, follower, next_batch, add)


def copy_in_processes(
    source: str,
    plan: Plan,
    reads: Iterable[tuple[pa.Table, Versions]],
    processes: parallel.Processes,
    next_batch: Callable[[], int],
    add: Callable[[BatchCounts], None],
) -> None:
    """Stream one table to a sink that shares its fill, each piece mapped and written in one of ``processes``.

    One process maps every row under one GIL, and left part of the machine
    idle (docs/performance.md, "Bootstrap from the source in several
    processes"). This thread only hands pieces over: at most one per process
    waits beside the ones being written, so the reads ahead stay bounded.
    """
    in_flight: deque[Future[BatchCounts]] = deque()
    for piece, versions in reads:
        in_flight.append(processes.submit(_copy_piece, source, plan, piece, versions, next_batch()))
        while len(in_flight) > parallel.PROCESSES or (in_flight and in_flight[0].done()):
            add(processes.result(in_flight.popleft()))
    for future in in_flight:
        add(processes.result(future))


def _copy_piece(
    setup: parallel.Setup, source: str, plan: Plan, piece: pa.Table, versions: Versions, batch: int
) -> BatchCounts:
    """In a process of ``snapshot.parallel``: one piece through its follower, as ``copy_here`` writes it."""
    total = BatchCounts()

    def add(counts: BatchCounts) -> None:
        nonlocal total
        total = total.merge(counts)

    follower = parallel.follower_of(setup)
    # Each process writes with the sink's ``writers``, as the daemon's tasks side by side do, not the ``fill_writers``
    # of one process alone: 3 each (6 bulk requests at once) measured slower (docs/performance.md).
    _write(_mapped(source, plan, piece, versions), follower, lambda: batch, add, follower.sink.writers)
    return total


def _mapped(source: str, plan: Plan, piece: pa.Table, versions: Versions) -> Iterator[Chunk]:
    """A piece's rows as the sink's rows, BATCH_ROWS at a time, with the rows that could not be mapped."""
    rows: list[Row] = []
    failed: list[tuple[Record, str]] = []
    mapping, keys = plan.mapping, plan.mapping.key_columns
    for data in piece.to_pylist():
        if isinstance(versions, int):
            version = versions
        else:
            version = versions[(data.pop(POSITION[0]), int(data.pop(POSITION[1])))]
        key = {c: data[c] for c in keys}
        change = Change(source, mapping.table, "r", key, None, None, version, plan.topic, -1, -1)
        try:
            rows.append(Row(change, mapping.target, doc_id(key, mapping), _doc(data, plan)))
        except PoisonRecord as err:
            failed.append((snapshot_record(change, data), str(err)))
        if len(rows) + len(failed) >= BATCH_ROWS:
            yield rows, failed
            rows, failed = [], []
    if rows or failed:
        yield rows, failed


def _write(
    chunks: Iterable[Chunk],
    follower: Follower,
    next_batch: Callable[[], int],
    add: Callable[[BatchCounts], None],
    writers: int | None = None,
) -> None:
    """Each chunk through ``follower.apply_rows`` on ``writers`` threads, while this thread maps the next.

    ``writers`` defaults to the follower's; ``writers`` + 1 chunks are in memory.
    """
    in_flight: deque[Future[BatchCounts]] = deque()
    writers = writers or follower.writers
    with ThreadPoolExecutor(max_workers=writers, thread_name_prefix="cdcsync-bootstrap-write") as writer:
        for rows, failed in chunks:
            in_flight.append(writer.submit(follower.apply_rows, next_batch(), rows, failed))
            while len(in_flight) > writers or (in_flight and in_flight[0].done()):
                add(in_flight.popleft().result())
        for future in in_flight:
            add(future.result())


def _doc(data: dict[str, Any], plan: Plan) -> dict[str, Any]:
    types = plan.mapping.types
    parsed = {
        c: convert(v, types.get(c)) if isinstance(v, str) and types.get(c) in jdbc.TEXT_KINDS else v
        for c, v in data.items()
    }
    return canonical_doc(parsed, plan.mapping)
