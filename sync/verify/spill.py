"""A verify's two sides on disk, split by the hash of the id, and compared one part at a time.

Each side's (id, digest) pairs are appended, as they are read, to one file
per side: the pairs go to one of ``PARTS`` parts by the hash of the id, and a
part's pairs are written ``CHUNK_ROWS`` at a time (a pickled list; the file
offsets of each part's chunks are kept, 16 bytes a chunk). The comparison
then reads one part of each side at a time into two dicts, so a row costs a
hash, a list append and a dict lookup, where a keyed table on disk (SQLite)
cost a B-tree insert per row and three joins after (docs/followers.md,
"Verify"). Both sides use the same hash (Python's, of this process), so an
id falls in the same part on both.

Memory: the chunk buffers (``PARTS x CHUNK_ROWS`` pairs per side) while
reading, then one part of each side. A part holding more than ``PART_ROWS``
pairs on one side (a table of more than ``PARTS x PART_ROWS`` rows, ~100
million) is split again into ``PARTS`` parts by another hash, on disk,
before it is compared: memory stays at ~``PART_ROWS`` pairs per side
whatever the table's size.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

PARTS = 256
CHUNK_ROWS = 512  # pairs of one part buffered before they are written
PART_ROWS = 400_000  # pairs of one part of one side held at once at most; a larger part is split again
DEPTHS = 4  # splits at most: only one id met millions of times on one side could fill a part at every depth
Pair = tuple[str, bytes]


class Spill:
    """One side's pairs in ``PARTS`` parts of one file (``depth``: which hash splits them)."""

    def __init__(self, path: Path, depth: int = 0) -> None:
        self.path, self.depth = path, depth
        self._file: IO[bytes] = open(path, "w+b")  # noqa: SIM115 - closed by close(), after the comparison
        self._buffers: list[list[Pair]] = [[] for _ in range(PARTS)]
        self._chunks = [array("q") for _ in range(PARTS)]  # each chunk's offset and length, in turn
        self.rows = [0] * PARTS  # pairs written to each part, an id met twice counted twice

    def part_of(self, ident: str) -> int:
        return (hash(ident) if self.depth == 0 else hash((self.depth, ident))) % PARTS

    def add(self, pairs: Iterable[Pair]) -> None:
        buffers, part_of = self._buffers, self.part_of
        for pair in pairs:
            part = part_of(pair[0])
            buffer = buffers[part]
            buffer.append(pair)
            if len(buffer) >= CHUNK_ROWS:
                self._write(part)

    def done(self) -> None:
        """Every buffered pair written: the parts can be read."""
        for part in range(PARTS):
            if self._buffers[part]:
                self._write(part)
        self._file.flush()

    def read(self, part: int) -> Iterator[Pair]:
        """The part's pairs in the order they were added."""
        chunks = self._chunks[part]
        for n in range(0, len(chunks), 2):
            self._file.seek(chunks[n])
            yield from pickle.loads(self._file.read(chunks[n + 1]))

    def close(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def _write(self, part: int) -> None:
        data = pickle.dumps(self._buffers[part], protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(0, 2)
        self._chunks[part].extend((self._file.tell(), len(data)))
        self._file.write(data)
        self.rows[part] += len(self._buffers[part])
        self._buffers[part] = []


Found = Callable[[list[str], list[str], list[str], int, int], None]


def compare_parts(source: Spill, store: Spill, found: Found) -> None:
    """Compare the two sides part by part; ``found(missing, extra, stale, source_ids, store_ids)`` per part.

    An id met twice on one side counts once, with the digest added last.
    """
    for part in range(PARTS):
        if max(source.rows[part], store.rows[part]) > PART_ROWS and source.depth < DEPTHS:
            _split(source, store, part, found)
            continue
        there = dict(source.read(part))
        held = dict(store.read(part))
        counts = len(there), len(held)
        missing, stale = [], []
        for ident, digest in there.items():
            other = held.pop(ident, None)
            if other is None:
                missing.append(ident)
            elif other != digest:
                stale.append(ident)
        found(missing, list(held), stale, *counts)


def _split(source: Spill, store: Spill, part: int, found: Found) -> None:
    """A part too large to hold: its pairs on both sides split again by another hash, then compared."""
    deeper = [Spill(side.path.with_name(f"{side.path.name}.{part}"), side.depth + 1) for side in (source, store)]
    try:
        for side, split in zip((source, store), deeper, strict=True):
            split.add(side.read(part))
            split.done()
        compare_parts(deeper[0], deeper[1], found)
    finally:
        for split in deeper:
            split.close()
