"""Compare a derived store with its source, row by row: the proof of convergence.

For each followed table, the source rows are read from the database, mapped
the way the follower maps changes, and put in the sink's stored form; the
sink's live rows are read back (``Sink.scan``). Each id is then ``missing``
(in the source, not the store), ``extra`` (in the store only) or ``stale``
(both, but the mapped values differ), compared by a digest of the values.

Memory does not grow with the table. Neither side is held: each row becomes
its id and a 16-byte digest of its fingerprint, written in batches of
``SPILL_ROWS``, each sorted by id (inserted at random, a keyed table that
outgrew the cache cost twice the time per row), to a SQLite file in a
temporary directory (one table per side, keyed by id), and the three kinds
of difference are joins of the two tables, which SQLite runs in its page
cache (``CACHE_KIB``) and on disk. What stays in memory is one batch of ids
and digests (~35 MiB), one page of the store's reader,
the cache, and at most ``LISTED`` ids of each kind (the counts are exact).
The disk it takes is ~2 x (id + 16 bytes + SQLite's overhead) per row, in
the temporary directory (``TMPDIR``). Alternatives: a key-ordered merge of
two sorted reads needs both sides sorted alike, which Elasticsearch
(no sort on ``_id``) and Redis (SCAN order) cannot give; range checksums with
bisection need a store that can checksum a key range, which only the
warehouse can.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from collections.abc import Iterable
from contextlib import closing
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from cdcsync.config import Config, FollowerConfig
from cdcsync.sync.catalog import mappings_for, source_rows
from cdcsync.sync.mapping import canonical_doc, doc_id, fingerprint
from cdcsync.sync.sink import Sink, batched

EXAMPLES = 5  # ids of each kind in a report's JSON
LISTED = 10_000  # ids of each kind a report keeps; the counts go on
SPILL_ROWS = 100_000  # rows written to the spill file at a time, sorted by id
CACHE_KIB = 64 * 1024  # SQLite's page cache for the comparison
# Nobody else reads the file and it is thrown away: no journal, no fsync.
SPILL = f"""
PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -{CACHE_KIB}; PRAGMA temp_store = FILE;
CREATE TABLE source (id TEXT PRIMARY KEY, digest BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE store (id TEXT PRIMARY KEY, digest BLOB NOT NULL) WITHOUT ROWID;
"""


@dataclass
class TableReport:
    follower: str
    table: str
    target: str
    source_rows: int = 0
    store_rows: int = 0
    missing: list[str] = field(default_factory=list)  # the first LISTED ids, in id order
    extra: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    missing_count: int = 0
    extra_count: int = 0
    stale_count: int = 0

    @property
    def clean(self) -> bool:
        return not (self.missing_count or self.extra_count or self.stale_count)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("missing", "extra", "stale"):
            data[key] = data[key][:EXAMPLES]
        data["clean"] = self.clean
        return data


def verify_follower(config: Config, follower: FollowerConfig, sink: Sink) -> list[TableReport]:
    mappings = mappings_for(config, follower)
    sink.open(list(mappings.values()))
    reports = []
    for source, table in config.followed_tables(follower):
        mapping = mappings[source.topic(table)]
        report = TableReport(follower.name, f"{source.name}.{table}", mapping.target)
        expected = (
            (doc_id(row, mapping), _digest(sink.stored_form(canonical_doc(row, mapping))))
            for row in source_rows(source, table)
        )
        held = ((ident, _digest(doc)) for ident, _version, doc in sink.scan(mapping.target))
        compare(expected, held, report)
        reports.append(report)
    return reports


def compare(expected: Iterable[tuple[str, bytes]], held: Iterable[tuple[str, bytes]], report: TableReport) -> None:
    """Fill ``report`` from the source's (id, digest) pairs and the store's, spilled to disk (module docstring).

    An id met twice on one side counts once, its last digest kept (SCAN may return a Redis key twice).
    """
    with tempfile.TemporaryDirectory(prefix="cdcsync-verify-") as tmp, closing(sqlite3.connect(Path(tmp) / "db")) as db:
        db.executescript(SPILL)
        report.source_rows = _fill(db, "source", expected)
        report.store_rows = _fill(db, "store", held)
        kinds = {
            "missing": "SELECT s.id FROM source s WHERE NOT EXISTS (SELECT 1 FROM store t WHERE t.id = s.id)",
            "extra": "SELECT t.id FROM store t WHERE NOT EXISTS (SELECT 1 FROM source s WHERE s.id = t.id)",
            "stale": "SELECT s.id FROM source s JOIN store t ON t.id = s.id WHERE t.digest != s.digest",
        }
        for kind, query in kinds.items():
            setattr(report, f"{kind}_count", db.execute(f"SELECT COUNT(*) FROM ({query})").fetchone()[0])
            setattr(report, kind, [row[0] for row in db.execute(f"{query} ORDER BY 1 LIMIT {LISTED}")])


def _fill(db: sqlite3.Connection, side: str, rows: Iterable[tuple[str, bytes]]) -> int:
    """Write ``rows`` into ``side``'s table; the number of ids it holds then."""
    for batch in batched(rows, SPILL_ROWS):
        batch.sort(key=itemgetter(0))  # in key order: each insert lands beside the last one's pages, not at random
        db.executemany(f"INSERT OR REPLACE INTO {side} (id, digest) VALUES (?, ?)", batch)
    db.commit()
    count: int = db.execute(f"SELECT COUNT(*) FROM {side}").fetchone()[0]
    return count


def _digest(doc: dict[str, Any]) -> bytes:
    return hashlib.blake2b(fingerprint(_present(doc)).encode(), digest_size=16).digest()


def _present(doc: dict[str, Any]) -> dict[str, Any]:
    """A null field and an absent one are the same value: a row written before ADD COLUMN lacks the field.

    Redis and Delta store no nulls anyway; Elasticsearch keeps an explicit
    null in ``_source``, which every query treats as absent.
    """
    return {name: value for name, value in doc.items() if value is not None}
