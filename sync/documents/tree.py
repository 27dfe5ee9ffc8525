"""A document's tree, checked against its tables' catalogs: what the mirror keeps and how rows relate.

``resolve`` turns a ``DocumentConfig`` and each table's ``TableMapping`` (its
columns, types and primary key as the catalog has them now) into ``Node``s,
refusing, with the path in the config and the fix, a column that is not
there, a table without a primary key, and foreign keys whose column count
differs from the columns they reference.

Rows are found by *link values*: the text of some columns' values, made the
way a document id is made from a key (``sync.mapping.doc_id``), always with
the referenced columns' types, so a foreign key and the key it references
give the same text. A link over a table's primary key is the row's own key
in the mirror; a link over other columns has its own index there
(``sync.documents.mirror``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcsync.config.document import DocumentChildConfig, DocumentConfig, DocumentNodeConfig
from cdcsync.errors import ConfigError
from cdcsync.sync.mapping import TableMapping, doc_id

UNIT = "documents."


def unit(document: str) -> str:
    """How a document is named where tables are named ``source.namespace.table`` (reports, results, metrics)."""
    return f"{UNIT}{document}"


def document_of(name: str) -> str:
    """The document a name made by ``unit`` stands for."""
    return name.removeprefix(UNIT)


@dataclass(frozen=True)
class Link:
    """Columns of ``table`` whose values reference (or are referenced by) another table's columns.

    ``encoder`` makes the link value with the referenced columns' types; ``own_key``: the columns are the
    table's primary key, so the value is the row's key in the mirror.
    """

    table: str  # "namespace.table"
    columns: tuple[str, ...]
    encoder: TableMapping = field(repr=False, compare=False)
    own_key: bool = False

    def value(self, doc: Mapping[str, Any] | None) -> str | None:
        """The link value of a row (its canonical document), or None: no row, or a null among the columns."""
        if doc is None:
            return None
        values = {}
        for column, ref in zip(self.columns, self.encoder.key_columns, strict=True):
            value = doc.get(column)
            if value is None:
                return None
            values[ref] = value
        return doc_id(values, self.encoder)

    @property
    def index(self) -> tuple[str, tuple[str, ...]] | None:
        """What the mirror indexes for this link: (table, columns), or None for a primary key."""
        return None if self.own_key else (self.table, self.columns)


@dataclass(frozen=True)
class Node:
    """A table in a document tree: its columns in the document, and how its rows relate to the parent's.

    ``up`` is this node's side of the relation, ``down`` the parent's side, for one_to_many and
    many_to_one; a many_to_many relation goes through the join table: ``through_parent`` references
    the parent's key, ``through_child`` this node's ``down``... see ``parent_keys`` and ``children``
    in ``sync.documents.engine``.
    """

    path: str  # in the config, for messages
    field: str  # the field in the parent's object ("" for the root)
    table: str
    topic: str
    key: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # (column, field name), in the document's order
    relation: str | None = None  # None for the root
    mine: Link | None = None  # this table's columns in the relation
    theirs: Link | None = None  # the parent's columns in it
    through: str | None = None  # the join table (many_to_many)
    through_topic: str | None = None
    through_parent: Link | None = None  # the join table's columns referencing the parent's key
    through_child: Link | None = None  # the join table's columns referencing this table's ``mine``
    scalar: str | None = None
    nested: bool = False
    children: tuple[Node, ...] = ()

    @property
    def many(self) -> bool:
        return self.relation in ("one_to_many", "many_to_many")

    def walk(self) -> list[Node]:
        """This node and every node below it, parents first."""
        found = [self]
        for child in self.children:
            found.extend(child.walk())
        return found


@dataclass(frozen=True)
class Tree:
    """One document of a follower, resolved: its name, target and root node."""

    name: str
    target: str
    root: Node

    def nodes(self) -> list[Node]:
        return self.root.walk()


def resolve(
    name: str,
    target: str,
    document: DocumentConfig,
    path: str,
    tables: Callable[[str], tuple[str, TableMapping] | None],
) -> Tree:
    """The document's tree; ``tables``: a table as the config writes it -> (its topic, its mapping), or None.

    Every problem found is listed in one ``ConfigError``.
    """
    problems: list[str] = []

    def table_of(text: str, where: str) -> tuple[str, TableMapping] | None:
        found = tables(text)
        if found is None:
            problems.append(f"{where}: table {text} is not followed")
            return None
        if not found[1].key_columns:
            problems.append(
                f"{where}: table {found[1].table} has no primary key; a document's rows are related by keys "
                "(add a primary key to the table)"
            )
            return None
        return found

    def known(mapping: TableMapping, columns: list[str], where: str) -> bool:
        missing = [c for c in columns if c not in mapping.types]
        if missing:
            have = ", ".join(mapping.types)
            problems.append(f"{where}: table {mapping.table} has no column(s) {missing} (its columns: {have})")
        return not missing

    def link(mapping: TableMapping, columns: list[str], referenced: TableMapping, ref: list[str], where: str) -> Link:
        if len(columns) != len(ref):
            problems.append(
                f"{where}: {len(columns)} column(s) {columns} reference {len(ref)} column(s) {ref} of "
                f"{referenced.table}; name as many, in the same order"
            )
        encoder = TableMapping(
            table=referenced.table,
            target=referenced.target,
            key_columns=tuple(ref),
            types={c: referenced.types[c] for c in ref if c in referenced.types},
        )
        return Link(mapping.table, tuple(columns), encoder, own_key=tuple(columns) == mapping.key_columns)

    def node_columns(config: DocumentNodeConfig, mapping: TableMapping, where: str) -> tuple[tuple[str, str], ...]:
        columns = list(config.columns) if config.columns is not None else list(mapping.types)
        known(mapping, columns, f"{where}.columns")
        stray = sorted(set(config.rename) - set(columns))
        if stray:
            problems.append(f"{where}.rename: {stray} are not among the document's columns of {mapping.table}")
        named = [(c, config.rename.get(c, c)) for c in columns]
        fields = [f for _, f in named] + list(config.children)
        repeated = sorted({f for f in fields if fields.count(f) > 1})
        if repeated:
            problems.append(f"{where}: field(s) {repeated} named twice (a column, a rename or a child); rename one")
        return tuple(named)

    def child(config: DocumentChildConfig, field_name: str, parent: TableMapping, where: str) -> Node | None:
        found = table_of(config.table, f"{where}.table")
        if found is None:
            return None
        topic, mapping = found
        ref = config.referenced_columns
        through = mine = theirs = through_parent = through_child = None
        through_topic = None
        if config.relation != "many_to_many":
            # one_to_many: the child holds the foreign key; many_to_one: the parent holds it
            child_holds = config.relation == "one_to_many"
            holder, referenced = (mapping, parent) if child_holds else (parent, mapping)
            ref = ref or list(referenced.key_columns)
            ok = known(holder, config.foreign_columns, f"{where}.foreign_key")
            if known(referenced, ref, f"{where}.references") and ok:
                holding = link(holder, config.foreign_columns, referenced, ref, f"{where}.foreign_key")
                held = link(referenced, ref, referenced, ref, f"{where}.references")
                mine, theirs = (holding, held) if child_holds else (held, holding)
        else:
            assert config.through is not None
            joined = table_of(config.through.table, f"{where}.through.table")
            ref = ref or list(mapping.key_columns)
            if joined is not None:
                through_topic, join = joined
                through = join.table
                ok = known(join, config.through.parent_columns, f"{where}.through.parent_key")
                ok &= known(join, config.through.child_columns, f"{where}.through.child_key")
                ok &= known(mapping, ref, f"{where}.references")
                if ok:
                    key = list(parent.key_columns)
                    through_parent = link(join, config.through.parent_columns, parent, key, f"{where}.through")
                    through_child = link(join, config.through.child_columns, mapping, ref, f"{where}.through")
                    mine = link(mapping, ref, mapping, ref, f"{where}.references")
                    theirs = link(parent, key, parent, key, f"{where}.through")
        if config.scalar is not None:
            known(mapping, [config.scalar], f"{where}.scalar")
        columns = () if config.scalar is not None else node_columns(config, mapping, where)
        children = tuple(
            n
            for n in (child(c, f, mapping, f"{where}.children.{f}") for f, c in config.children.items())
            if n is not None
        )
        return Node(
            path=where,
            field=field_name,
            table=mapping.table,
            topic=topic,
            key=mapping.key_columns,
            columns=columns,
            relation=config.relation,
            mine=mine,
            theirs=theirs,
            through=through,
            through_topic=through_topic,
            through_parent=through_parent,
            through_child=through_child,
            scalar=config.scalar,
            nested=config.nested,
            children=children,
        )

    root_table = table_of(document.table, f"{path}.table")
    if root_table is None:
        raise ConfigError(problems)
    topic, mapping = root_table
    columns = node_columns(document, mapping, path)
    kids = tuple(
        n for n in (child(c, f, mapping, f"{path}.children.{f}") for f, c in document.children.items()) if n is not None
    )
    if problems:
        raise ConfigError(problems)
    root = Node(path=path, field="", table=mapping.table, topic=topic, key=mapping.key_columns, columns=columns,
                children=kids)  # fmt: skip
    return Tree(name, target, root)
