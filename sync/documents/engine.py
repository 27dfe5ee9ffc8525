"""Documents from the log: apply changes to the mirror, find the roots they touch, rebuild whole documents.

A change of any table of a document's tree is applied to that table's rows in
the mirror (``sync.documents.mirror``) under the version rule, and marks for a
rebuild every root whose document it belongs to, before and after the change:

- walking up from the row's old image (read from the mirror before it is
  replaced) and from its new one, parent by parent, to the roots: a child moved
  to another parent (its foreign key updated) dirties both roots;
- for a table that is many rows' object (``many_to_one``), every row that
  references it, and each of their roots (the fan-out of a middle level);
- for a join table's row, the root above its parent.

The order changes of different rows are applied in does not matter: each
change dirties the roots its row belongs to before and after it, and an
ancestor changed in the same batch dirties its own roots, which hold the row
too. After the batch, each dirty root's document is rebuilt whole from the
mirror (``build``): the same rows give the same document whichever order
their changes came in.

A document's version: the newest version among the rows in it and the
changes that dirtied it, and always above the version last written for the
root (a change of one table can reach the follower after a newer one of
another, in a later batch); see docs/documents.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from cdcsync.sync.documents.mirror import Doc, Mirror, TableSpec
from cdcsync.sync.documents.tree import Link, Node, Tree
from cdcsync.sync.mapping import Row

NESTED_LIMIT = 10_000  # Elasticsearch's index.mapping.nested_objects.limit by default


@dataclass
class Built:
    """A root's document as the mirror holds it now: None once the root row is gone."""

    key: str
    version: int
    doc: dict[str, Any] | None
    nested: int  # objects in its nested arrays, at every level (Elasticsearch's count)
    written: int = -1  # the version last written for the root; -1: never (a missing root then needs no delete)


def specs(trees: Iterable[Tree]) -> dict[str, TableSpec]:
    """What the mirror indexes of each table the trees use: the column sets their links find rows by."""
    links: dict[str, dict[tuple[str, ...], Link]] = {}
    for tree in trees:
        for node in tree.nodes():
            links.setdefault(node.table, {})
            if node.through is not None:
                links.setdefault(node.through, {})
            for link in (node.mine, node.theirs, node.through_parent, node.through_child):
                if link is not None and link.index is not None:
                    links.setdefault(link.table, {})[link.columns] = link
    return {table: TableSpec(tuple(sorted(found)), dict(found)) for table, found in links.items()}


def fingerprint(tree: Tree) -> str:
    """A document's mapping as the mirror remembers it: another one means every document is written again."""
    return hashlib.sha256(repr(tree).encode()).hexdigest()


def _value(link: Link, key: str, doc: Doc | None) -> str | None:
    """A row's link value: its key, where the link is its primary key (a deleted row has one too)."""
    return key if link.own_key else link.value(doc)


class Documents:
    """The documents of one follower over one mirror."""

    def __init__(self, trees: Iterable[Tree], mirror: Mirror) -> None:
        self.trees = list(trees)
        self.mirror = mirror
        self._parent: dict[int, tuple[Tree, Node | None]] = {}  # id(node) -> (its tree, its parent)
        self._uses: dict[str, list[tuple[Tree, Node, bool]]] = {}  # table -> (tree, node, as its join table)
        for tree in self.trees:
            self._parent[id(tree.root)] = (tree, None)
            for node in tree.nodes():
                self._uses.setdefault(node.table, []).append((tree, node, False))
                if node.through is not None:
                    self._uses.setdefault(node.through, []).append((tree, node, True))
                for child in node.children:
                    self._parent[id(child)] = (tree, node)

    # -- changes -> mirror + dirty roots ---------------------------------------------------------------------

    def apply(self, rows: Iterable[Row], walk: bool = True) -> tuple[list[Row], int]:
        """Apply rows (each the last change of its key in a chunk) to the mirror; (applied, older count).

        Runs inside the caller's transaction (``Mirror.begin``). ``walk=False``: no roots are marked (a
        bootstrap's fill marks them all once it is done: ``Mirror.dirty_all``).
        """
        applied: list[Row] = []
        older = 0
        for row in rows:
            table = row.change.table
            if table not in self._uses:
                older += 1  # not a table of these documents (cannot happen: the follower reads only theirs)
                continue
            held = self.mirror.get(table, row.doc_id)
            if held is not None and held[0] >= row.version:
                older += 1
                continue
            old = held[1] if held is not None else None
            dirtied: dict[str, dict[str, int]] = {}
            for tree, node, joined in self._uses[table] if walk else ():
                roots = dirtied.setdefault(tree.name, {})
                for doc in (old, row.doc):
                    for root in self._join_roots(node, doc) if joined else self._roots(node, row.doc_id, doc):
                        roots[root] = row.version
            self.mirror.put(table, row.doc_id, row.version, row.doc, old)
            for name, roots in dirtied.items():
                if roots:
                    self.mirror.dirty(name, roots)
            applied.append(row)
        return applied, older

    def _roots(self, node: Node, key: str, doc: Doc | None) -> set[str]:
        """The roots whose documents hold this row of ``node`` (as ``doc``; None: a row deleted or not there)."""
        tree, parent = self._parent[id(node)]
        if parent is None:
            return {key}
        found: set[str] = set()
        for parent_key in self._parent_keys(node, key, doc):
            held = self.mirror.get(parent.table, parent_key)
            found |= self._roots(parent, parent_key, held[1] if held is not None else None)
        return found

    def _parent_keys(self, node: Node, key: str, doc: Doc | None) -> list[str]:
        assert node.mine is not None and node.theirs is not None
        value = _value(node.mine, key, doc)
        if value is None:
            return []
        if node.relation == "many_to_many":
            assert node.through is not None and node.through_child is not None and node.through_parent is not None
            joins = self._find(node.through, node.through_child, value)
            return [p for _, _, j in self.mirror.live(node.through, joins) if (p := node.through_parent.value(j))]
        return self._find(self._parent[id(node)][1].table, node.theirs, value)  # type: ignore[union-attr]

    def _join_roots(self, node: Node, doc: Doc | None) -> set[str]:
        """The roots above a join table's row: its parent's (the row as ``doc``)."""
        assert node.through_parent is not None
        parent_key = node.through_parent.value(doc)
        if parent_key is None:
            return set()
        _, parent = self._parent[id(node)]
        assert parent is not None
        held = self.mirror.get(parent.table, parent_key)
        return self._roots(parent, parent_key, held[1] if held is not None else None)

    def _find(self, table: str, link: Link, value: str) -> list[str]:
        """Keys of ``table``'s rows whose ``link`` columns have ``value``."""
        return [value] if link.own_key else self.mirror.keys_by(table, link.columns, value)

    # -- dirty roots -> documents ----------------------------------------------------------------------------

    def build(self, tree: Tree, key: str) -> tuple[dict[str, Any] | None, int, int]:
        """The root's document from the mirror: (document or None, newest row version in it, nested objects)."""
        held = self.mirror.get(tree.root.table, key)
        if held is None or held[1] is None:
            return None, held[0] if held is not None else -1, 0
        state = [held[0], 0]
        return self._object(tree.root, key, held[1], state), state[0], state[1]

    def _object(self, node: Node, key: str, doc: Doc, state: list[int]) -> dict[str, Any]:
        obj = {name: doc.get(column) for column, name in node.columns}
        for child in node.children:
            rows = list(self._children(child, key, doc, state))
            if child.many:
                if child.scalar is not None:
                    obj[child.field] = [d.get(child.scalar) for _, _, d in rows]
                else:
                    obj[child.field] = [self._object(child, k, d, state) for k, _, d in rows]
                if child.nested:
                    state[1] += len(rows)
            else:
                obj[child.field] = self._object(child, rows[0][0], rows[0][2], state) if rows else None
        return obj

    def _children(self, node: Node, parent_key: str, parent: Doc, state: list[int]) -> Iterator[tuple[str, int, Doc]]:
        """The live rows of ``node`` under one parent row, in key order, each row's version counted in ``state``."""
        assert node.mine is not None and node.theirs is not None
        if node.relation == "many_to_many":
            assert node.through is not None and node.through_parent is not None and node.through_child is not None
            keys: list[str] = []
            for _, version, join in self.mirror.live(node.through, self._find(node.through, node.through_parent,
                                                                                 parent_key)):  # fmt: skip
                state[0] = max(state[0], version)
                value = node.through_child.value(join)
                if value is not None:
                    keys.extend(self._find(node.table, node.mine, value))
        else:
            value = _value(node.theirs, parent_key, parent)
            keys = [] if value is None else self._find(node.table, node.mine, value)
        for found in self.mirror.live(node.table, keys):
            state[0] = max(state[0], found[1])
            yield found

    def rebuilt(self, tree: Tree, limit: int) -> list[Built]:
        """Up to ``limit`` of the tree's dirty roots, each rebuilt with its new version."""
        out = []
        for key, changed, written in self.mirror.pending(tree.name, limit):
            doc, newest, nested = self.build(tree, key)
            out.append(Built(key, max(written + 1, changed, newest), doc, nested, written))
        return out
