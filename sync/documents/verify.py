"""Verify documents: each built from the source with SQL, compared with the stored one, in bounded memory.

The source side does not use the follower's mirror or its join code: the root
table is streamed in key order, a page of roots at a time, and each level of
the tree is one query per page (``WHERE (foreign key) IN (the page's
values)``), its rows grouped under their parents in key order, as the
follower orders them. Each page's documents are compared with the store's
(``Sink.lookup``) in the store's form (``Sink.stored_form``). The ids of the
source's roots go to a file (SQLite, in a temporary directory), not to memory;
the store is then scanned once for documents the source has no root for.

Memory holds one page of roots and their trees. The SQL sees the source at
the time of each query, so a document changed meanwhile shows as stale in a
pass; ``verify`` says to run again, as for tables (docs/verify.md).
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.errors import ConfigError
from cdcsync.sources import kind_of
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.documents.build import trees
from cdcsync.sync.documents.follower import stored
from cdcsync.sync.documents.tree import Node, Tree, unit
from cdcsync.sync.mapping import TableMapping, canonical_doc, doc_id
from cdcsync.sync.sink import Sink, batched
from cdcsync.sync.verify.report import EXAMPLES, TableReport

PAGE = 500  # roots a page


class SourceDocuments:
    """The documents of one tree as the source holds them now, read with SQL."""

    def __init__(self, source: SourceConfig, tree: Tree, mappings: dict[str, TableMapping]) -> None:
        self.source, self.tree = source, tree
        self.kind = kind_of(source)
        self.by_table = {m.table: m for m in mappings.values()}

    def _sql_table(self, table: str) -> str:
        namespace, _, name = table.partition(".")
        return self.kind.qualified(TableRef(namespace=namespace, table=name))

    def _where_in(self, columns: Sequence[str], values: list[tuple[Any, ...]]) -> tuple[str, tuple[Any, ...]]:
        quoted = [self.kind.quote(c) for c in columns]
        one = "(" + ", ".join(["%s"] * len(columns)) + ")"
        if len(columns) == 1:
            return f"{quoted[0]} IN ({', '.join(['%s'] * len(values))})", tuple(v[0] for v in values)
        return f"({', '.join(quoted)}) IN ({', '.join([one] * len(values))})", tuple(x for v in values for x in v)

    def _rows(self, table: str, columns: Sequence[str], values: set[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """``table``'s rows whose ``columns`` hold one of ``values``."""
        rows: list[dict[str, Any]] = []
        for part in batched(sorted(values, key=repr), PAGE):
            where, params = self._where_in(columns, list(part))
            rows.extend(
                self.kind.reads.page(self.source, f"SELECT * FROM {self._sql_table(table)} WHERE {where}", params)
            )
        return rows

    def _ident(self, table: str, row: dict[str, Any]) -> str:
        mapping = self.by_table[table]
        return doc_id({c: row[c] for c in mapping.key_columns}, mapping)

    def documents(self) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """Pages of (root id, document), roots in key order."""
        root = self.tree.root
        mapping = self.by_table[root.table]
        order = ", ".join(self.kind.quote(c) for c in mapping.key_columns)
        query = f"SELECT * FROM {self._sql_table(root.table)} ORDER BY {order}"
        for page in batched(self.kind.reads.stream(self.source, query), PAGE):
            rows = list(page)
            built = self._objects(root, rows)
            yield [(self._ident(root.table, r), doc) for r, doc in zip(rows, built, strict=True)]

    def _objects(self, node: Node, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each row's object: its columns, and its children's, one query per child for all ``rows``."""
        mapping = self.by_table[node.table]
        canon = [canonical_doc(r, mapping) for r in rows]
        objects = [{name: c.get(column) for column, name in node.columns} for c in canon]
        for child in node.children:
            groups = self._children(child, node, rows)
            flat = [r for group in groups for r in group]
            if child.scalar is not None:
                child_mapping = self.by_table[child.table]
                values = [canonical_doc(r, child_mapping).get(child.scalar) for r in flat]
            else:
                values = self._objects(child, flat) if flat else []
            at = 0
            for obj, group in zip(objects, groups, strict=True):
                mine = values[at : at + len(group)]
                at += len(group)
                obj[child.field] = mine if child.many else (mine[0] if mine else None)
        return objects

    def _children(self, child: Node, parent: Node, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """For each parent row, its child rows, in the child's key order."""
        assert child.mine is not None and child.theirs is not None
        ident: Callable[[dict[str, Any]], str] = lambda r: self._ident(child.table, r)  # noqa: E731
        if child.relation == "many_to_many":
            assert child.through is not None and child.through_parent is not None and child.through_child is not None
            keys = [tuple(r[c] for c in parent.key) for r in rows]
            joins = self._rows(child.through, child.through_parent.columns, set(keys))
            up, down = child.through_parent.columns, child.through_child.columns
            pairs = [(tuple(j[c] for c in up), tuple(j[c] for c in down)) for j in joins]
            found = self._rows(child.table, child.mine.columns, {v for _, v in pairs if None not in v})
            by_value = {tuple(r[c] for c in child.mine.columns): r for r in found}
            under: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
            for p, v in pairs:
                if v in by_value:
                    under.setdefault(p, []).append(by_value[v])
            return [sorted(under.get(k, []), key=ident) for k in keys]
        wanted = [tuple(r[c] for c in child.theirs.columns) for r in rows]
        found = self._rows(child.table, child.mine.columns, {v for v in wanted if None not in v})
        grouped: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in found:
            grouped.setdefault(tuple(r[c] for c in child.mine.columns), []).append(r)
        return [sorted(grouped.get(v, []), key=ident) if None not in v else [] for v in wanted]


def differences(expected: dict[str, Any], held: dict[str, Any]) -> dict[str, list[Any]]:
    """Each top-level field whose stored form differs: ``[source's, store's]``, as JSON has it or as its text."""
    return {
        name: [_shown(expected.get(name)), _shown(held.get(name))]
        for name in sorted(set(expected) | set(held))
        if expected.get(name) != held.get(name)
    }


def _shown(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool | list | dict) else str(value)


def verify_documents(
    config: Config,
    follower: FollowerConfig,
    sink: Sink,
    only: str | None = None,
    progress: Callable[[str], None] | None = None,
    pace: float | None = None,
) -> list[TableReport]:
    """Each document of the follower (``only``: that one) compared with what its store holds; a report each.

    ``pace``: roots per second at most (the daemon's background pass).
    """
    assert follower.documents is not None
    if only is not None and only not in follower.documents:
        raise ConfigError(
            [f"follower {follower.name} keeps no document {only}; it keeps: {', '.join(follower.documents)}"]
        )
    mappings = mappings_for(config, follower)
    reports = []
    for tree in trees(config, follower, mappings):
        if only is not None and tree.name != only:
            continue
        source = config.document_source(follower, tree.name)
        reports.append(_verify(follower, source, tree, mappings, sink, progress, pace))
    return reports


def _verify(
    follower: FollowerConfig,
    source: SourceConfig,
    tree: Tree,
    mappings: dict[str, TableMapping],
    sink: Sink,
    progress: Callable[[str], None] | None,
    pace: float | None,
) -> TableReport:
    report = TableReport(follower.name, unit(tree.name), tree.target)
    with tempfile.TemporaryDirectory(prefix="cdcsync-verify-") as tmp:
        seen = sqlite3.connect(str(Path(tmp) / "roots.sqlite"))
        seen.execute("CREATE TABLE roots (k TEXT PRIMARY KEY) WITHOUT ROWID")
        for page in SourceDocuments(source, tree, mappings).documents():
            seen.executemany("INSERT OR IGNORE INTO roots VALUES (?)", ((k,) for k, _ in page))
            report.source_rows += len(page)
            in_store = {k: doc for k, _, doc in sink.lookup(tree.target, [k for k, _ in page])}
            for key, doc in page:
                held = in_store.get(key)
                if held is None:
                    report.missing_count += 1
                    if len(report.missing) < EXAMPLES:
                        report.missing.append(key)
                    continue
                expected = sink.stored_form(stored(sink, doc) or {})
                if held != expected:
                    report.stale_count += 1
                    if len(report.stale) < EXAMPLES:
                        report.stale.append(key)
                        report.differing[key] = differences(expected, held)
            if progress is not None:
                progress(f"document {tree.name}: {report.source_rows} roots compared")
            if pace:
                time.sleep(len(page) / pace)
        for scanned in batched(sink.scan(tree.target), PAGE):
            report.store_rows += len(scanned)
            keys = [k for k, _, _ in scanned]
            marks = ",".join("?" * len(keys))
            known = {k for (k,) in seen.execute(f"SELECT k FROM roots WHERE k IN ({marks})", keys)}
            for key in keys:
                if key not in known:
                    report.extra_count += 1
                    if len(report.extra) < EXAMPLES:
                        report.extra.append(key)
        seen.close()
    return report
