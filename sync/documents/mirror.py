"""A document follower's state on disk: each table's rows as the documents use them, and the roots to rebuild.

One SQLite database per follower (``<state>/documents/<follower>/mirror.sqlite``),
written only by the follower's query on the driver:

- ``r<i>``: table *i*'s rows, ``k`` (the row's document id, ``sync.mapping.doc_id``),
  ``v`` (the version of the change it holds) and ``doc`` (the row's columns, canonical
  values, pickled; NULL once deleted: the version stays, so a replayed older change of
  the key is still refused). Every column, not only those the documents use now: a
  column added to a document's mapping is in every row already, and the documents are
  rebuilt from the mirror when their mapping changes (``fingerprint``);
- ``l<i>_<j>``: an index of table *i*'s live rows by the link value of some of its
  columns (a foreign key, or columns a foreign key references), one per such set;
- ``roots_<d>``: document *d*'s roots as last written: the version written, and ``s``,
  the mirror's write counter when it was (``seq``): a reindex rewrites, after its switch,
  the roots written since it began (``cdcsync.snapshot.documents``);
- ``dirty_<d>``: roots of document *d* that changed and are not written yet, with the
  newest version that changed them;
- ``meta``: what each numbered table holds, and each document's mapping's fingerprint: a
  document whose mapping changed since has every root dirty when the mirror opens, and an
  index new to a table is filled from the rows it holds.

A batch's changes and the roots they dirty commit in one transaction, before
any document is written; a page of roots records its versions (``writing``)
before it is written and leaves ``dirty`` once it is (``written``). A crash anywhere leaves the roots still to write
in ``dirty``, and the replayed batch finds every change already applied (the
version rule): the documents are written on the next batch. Pickle round-trips
every canonical value (``Decimal``, ``datetime``, ``bytes``) as it is; the
file is the follower's own, under the private state directory.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Doc = dict[str, Any]
CACHE_KIB = 65536  # SQLite's page cache: the mirror's memory, whatever its size on disk (docs/documents.md)


@dataclass(frozen=True)
class TableSpec:
    """The column sets the mirror indexes a table's rows by (its links other than its primary key)."""

    indexes: tuple[tuple[str, ...], ...] = ()
    links: Mapping[tuple[str, ...], Any] = field(default_factory=dict)  # columns -> Link (its value())


class Mirror:
    def __init__(self, path: Path, tables: Mapping[str, TableSpec], documents: Mapping[str, tuple[str, str]]) -> None:
        """``documents``: each document's name -> (its root table, the fingerprint of its mapping)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self.tables = dict(tables)
        self._ids = {table: i for i, table in enumerate(sorted(tables))}
        self._docs = dict(documents)
        # A reindex reads the mirror from another process while the follower writes it: a writer waits for the
        # other's transaction (a batch's) rather than failing at once.
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a committed batch survives a power loss too
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")  # the pages a lookup walks, at most this much memory
        self._names = self._schema()

    def _schema(self) -> dict[Any, str]:
        """Create what is missing; the tables are named by number, their names kept in ``meta``."""
        db = self._db
        db.execute("CREATE TABLE IF NOT EXISTS meta (what TEXT PRIMARY KEY, name TEXT NOT NULL)")
        known = dict(db.execute("SELECT what, name FROM meta"))
        names: dict[Any, str] = {}
        new: list[tuple[str, tuple[str, ...]]] = []
        db.execute("BEGIN")
        for table, spec in self.tables.items():
            rows = self._sql_name(known, f"rows:{table}", "r")
            db.execute(f"CREATE TABLE IF NOT EXISTS {rows} (k TEXT PRIMARY KEY, v INTEGER NOT NULL, doc BLOB)")
            names[table] = rows
            for columns in spec.indexes:
                what = f"link:{table}:{','.join(columns)}"
                if what not in known:
                    new.append((table, columns))
                index = self._sql_name(known, what, "l")
                db.execute(f"CREATE TABLE IF NOT EXISTS {index} (v TEXT NOT NULL, k TEXT NOT NULL, PRIMARY KEY (v, k))"
                           " WITHOUT ROWID")  # fmt: skip
                names[(table, columns)] = index
        for document in self._docs:
            roots = self._sql_name(known, f"roots:{document}", "roots")
            dirty = self._sql_name(known, f"dirty:{document}", "dirty")
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {roots} (k TEXT PRIMARY KEY, v INTEGER NOT NULL, s INTEGER NOT NULL)"
            )
            db.execute(f"CREATE TABLE IF NOT EXISTS {dirty} (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
            names[("roots", document)], names[("dirty", document)] = roots, dirty
        self._names = names
        for table, columns in new:  # an index new to a table that has rows: filled from them
            link, index = self.tables[table].links[columns], names[(table, columns)]
            for key, doc in db.execute(f"SELECT k, doc FROM {names[table]} WHERE doc IS NOT NULL"):
                value = link.value(pickle.loads(doc))
                if value is not None:
                    db.execute(f"INSERT OR IGNORE INTO {index} VALUES (?, ?)", (value, key))
        for document, (root, fingerprint) in self._docs.items():
            what = f"fingerprint:{document}"
            if known.get(what) == fingerprint:
                continue
            self._dirty_all(document, root)  # a mapping new or changed since: every root known is written again
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (what, fingerprint))
            known[what] = fingerprint
        db.execute("COMMIT")
        return names

    def _sql_name(self, known: dict[str, str], what: str, prefix: str) -> str:
        if what not in known:
            known[what] = f"{prefix}{len(known)}"
            self._db.execute("INSERT INTO meta VALUES (?, ?)", (what, known[what]))
        return known[what]

    # -- a batch ---------------------------------------------------------------------------------------------

    def begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def get(self, table: str, key: str) -> tuple[int, Doc | None] | None:
        """The version the mirror holds for a row, and its document (None: deleted); None: never seen."""
        found = self._db.execute(f"SELECT v, doc FROM {self._names[table]} WHERE k = ?", (key,)).fetchone()
        if found is None:
            return None
        return found[0], (pickle.loads(found[1]) if found[1] is not None else None)

    def put(self, table: str, key: str, version: int, doc: Doc | None, old: Doc | None) -> None:
        """Hold ``doc`` (None: deleted) at ``version`` for the row; ``old`` is what it held, for its indexes."""
        spec = self.tables[table]
        blob = None if doc is None else pickle.dumps(doc, protocol=5)
        self._db.execute(f"INSERT OR REPLACE INTO {self._names[table]} VALUES (?, ?, ?)", (key, version, blob))
        for columns in spec.indexes:
            link = spec.links[columns]
            before, after = link.value(old), link.value(doc)
            if before == after:
                continue
            index = self._names[(table, columns)]
            if before is not None:
                self._db.execute(f"DELETE FROM {index} WHERE v = ? AND k = ?", (before, key))
            if after is not None:
                self._db.execute(f"INSERT OR IGNORE INTO {index} VALUES (?, ?)", (after, key))

    def live(self, table: str, keys: Iterable[str]) -> Iterator[tuple[str, int, Doc]]:
        """The live rows among ``keys`` (key, version, document), in key order."""
        rows = self._names[table]
        for key in sorted(set(keys)):
            found = self._db.execute(f"SELECT v, doc FROM {rows} WHERE k = ?", (key,)).fetchone()
            if found is not None and found[1] is not None:
                yield key, found[0], pickle.loads(found[1])

    def keys_by(self, table: str, columns: tuple[str, ...], value: str) -> list[str]:
        """Keys of ``table``'s live rows whose ``columns`` have the link value ``value``, in key order."""
        index = self._names[(table, columns)]
        return [k for (k,) in self._db.execute(f"SELECT k FROM {index} WHERE v = ? ORDER BY k", (value,))]

    # -- roots -----------------------------------------------------------------------------------------------

    def dirty(self, document: str, roots: Mapping[str, int]) -> None:
        """Mark ``roots`` (root key -> the version of the change) of ``document`` for a rebuild."""
        table = self._names[("dirty", document)]
        self._db.executemany(
            f"INSERT INTO {table} VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = max(v, excluded.v)", roots.items()
        )

    def dirty_all(self, document: str) -> None:
        """Mark every root of ``document`` the mirror knows (live or deleted) for a rebuild (a bootstrap's fill)."""
        self.begin()
        try:
            self._dirty_all(document, self._docs[document][0])
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def _dirty_all(self, document: str, root: str) -> None:
        self._db.execute(f"INSERT INTO {self._names[('dirty', document)]} SELECT k, v FROM {self._names[root]} "
                         "WHERE true ON CONFLICT (k) DO UPDATE SET v = max(v, excluded.v)")  # fmt: skip

    def pending(self, document: str, limit: int) -> list[tuple[str, int, int]]:
        """Up to ``limit`` roots to rebuild: (key, the newest version that changed it, the version last written)."""
        dirty, roots = self._names[("dirty", document)], self._names[("roots", document)]
        return list(
            self._db.execute(
                f"SELECT d.k, d.v, coalesce(r.v, -1) FROM {dirty} d LEFT JOIN {roots} r ON r.k = d.k ORDER BY d.k "
                "LIMIT ?",
                (limit,),
            )
        )

    def pending_count(self, document: str) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {self._names[('dirty', document)]}").fetchone()[0])

    def writing(self, document: str, versions: Mapping[str, int]) -> None:
        """Record the versions about to be written for these roots, and the write counter, before writing them."""
        self.begin()
        try:
            self.record(document, versions)
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def record(self, document: str, versions: Mapping[str, int]) -> None:
        """``writing`` inside the caller's transaction (``begin``)."""
        seq = self.seq() + 1
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (str(seq),))
        self._db.executemany(f"INSERT OR REPLACE INTO {self._names[('roots', document)]} VALUES (?, ?, ?)",
                             ((k, v, seq) for k, v in versions.items()))  # fmt: skip

    def written(self, document: str, keys: Iterable[str]) -> None:
        """Take these roots off the dirty list: their documents are in the store."""
        dirty = self._names[("dirty", document)]
        self.begin()
        try:
            self._db.executemany(f"DELETE FROM {dirty} WHERE k = ?", ((k,) for k in keys))
            self.commit()
        except BaseException:
            self.rollback()
            raise

    def seq(self) -> int:
        """The write counter: how many pages of documents were recorded as written (``writing``)."""
        found = self._db.execute("SELECT name FROM meta WHERE what = 'seq'").fetchone()
        return int(found[0]) if found else 0

    def written_since(self, document: str, seq: int) -> list[str]:
        """The roots of ``document`` recorded as written after the write counter stood at ``seq``."""
        roots = self._names[("roots", document)]
        return [k for (k,) in self._db.execute(f"SELECT k FROM {roots} WHERE s > ? ORDER BY k", (seq,))]

    def roots(self, document: str, after: str, limit: int) -> list[tuple[str, int]]:
        """Live roots of ``document`` in key order after ``after``: (key, the version last written, or -1)."""
        root, table = self._docs[document][0], self._names[("roots", document)]
        return list(
            self._db.execute(
                f"SELECT r.k, coalesce(w.v, -1) FROM {self._names[root]} r LEFT JOIN {table} w ON w.k = r.k "
                "WHERE r.k > ? AND r.doc IS NOT NULL ORDER BY r.k LIMIT ?",
                (after, limit),
            )
        )

    def version_written(self, document: str, key: str) -> int:
        """The version last recorded for a root of ``document`` (``writing``), or -1."""
        found = self._db.execute(f"SELECT v FROM {self._names[('roots', document)]} WHERE k = ?", (key,)).fetchone()
        return int(found[0]) if found else -1

    def count_live(self, table: str) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {self._names[table]} WHERE doc IS NOT NULL").fetchone()[0])

    def reading(self) -> _Reading:
        """A read transaction: what is read inside it is one state of the mirror (SQLite's WAL snapshot)."""
        return _Reading(self)

    def close(self) -> None:
        self._db.close()


class _Reading:
    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror

    def __enter__(self) -> Mirror:
        self.mirror._db.execute("BEGIN")
        return self.mirror

    def __exit__(self, *exc: object) -> None:
        self.mirror.rollback()
