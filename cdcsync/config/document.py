"""A document mapping: a root table and a tree of related tables, kept as one nested document per root row.

Part of the config's models (``cdcsync.config``), which holds and re-exports them; docs/documents.md
describes the model, and ``cdcsync.sync.documents`` follows it.

A follower with ``documents`` keeps those documents instead of one index or key space per table. Each
document names its root table and, under ``children``, the tables related to it, each by one of four
relations:

===============  =================================================  ====================================
relation         the foreign key                                    the field in the parent
===============  =================================================  ====================================
``one_to_many``  the child's ``foreign_key`` references the         an array of objects (or, with
                 parent's ``references`` (default: its key)         ``scalar``, of one column's values)
``many_to_one``  the parent's ``foreign_key`` references the        one object, or null
                 child's ``references`` (default: its key)
``many_to_many`` ``through``: a join table whose ``parent_key``     an array of objects (or values)
                 references the parent and ``child_key`` the child
===============  =================================================  ====================================

What this module checks needs no database: relations complete, names that fit, no table twice on one
path (a cycle), depth. That the columns exist and the keys match is checked against each table's catalog
when the follower starts (``cdcsync.sync.documents.tree``), with the path in the config and the fix.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from cdcsync.config.base import Strict as _Strict

Relation = Literal["one_to_many", "many_to_one", "many_to_many"]
MAX_DEPTH = 8  # levels below the root; a deeper tree is refused (each level is one lookup per row on a rebuild)
FIELD_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


def _columns(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


class ThroughConfig(_Strict):
    """The join table of a many-to-many relation: one row per pair of related parent and child."""

    table: str = Field(min_length=1, description="the join table, `namespace.table`, of the document's source")
    parent_key: str | list[str] = Field(description="its column(s) that reference the parent's key")
    child_key: str | list[str] = Field(description="its column(s) that reference the child's key")

    @property
    def parent_columns(self) -> list[str]:
        return _columns(self.parent_key)

    @property
    def child_columns(self) -> list[str]:
        return _columns(self.child_key)


class DocumentNodeConfig(_Strict):
    """A table in a document: which of its columns the document holds, under which names, and its children."""

    columns: list[str] | None = Field(None, description="the columns the document holds (default: every column)")
    rename: dict[str, str] = Field(default_factory=dict, description="column -> its field name in the document")
    children: dict[str, DocumentChildConfig] = Field(
        default_factory=dict,
        description="field name -> a related table, nested under this one's rows (a child's children the same way, "
        "up to 8 levels below the root)",
    )

    @field_validator("children")
    @classmethod
    def _field_names(cls, value: dict[str, DocumentChildConfig]) -> dict[str, DocumentChildConfig]:
        bad = [name for name in value if not re.match(FIELD_PATTERN, name)]
        if bad:
            raise ValueError(f"children: field name(s) {bad} must be letters, digits and _, not starting with a digit")
        return value


class DocumentChildConfig(DocumentNodeConfig):
    """A table related to its parent in the document tree, and how."""

    table: str = Field(min_length=1, description="the related table, `namespace.table`, of the document's source")
    relation: Relation = Field(description="one_to_many, many_to_one or many_to_many (docs/documents.md)")
    foreign_key: str | list[str] | None = Field(
        None,
        description="one_to_many: the child's column(s) referencing the parent; many_to_one: the parent's "
        "column(s) referencing the child; many_to_many: none (see through)",
    )
    references: str | list[str] | None = Field(
        None,
        description="the column(s) the foreign key references (default: that table's primary key)",
    )
    through: ThroughConfig | None = Field(None, description="many_to_many: the join table")
    scalar: str | None = Field(
        None, description="one_to_many / many_to_many: an array of this column's values instead of objects"
    )
    nested: bool = Field(
        False,
        description="elasticsearch: map the array as `nested` (each object queried on its own; at most 10,000 "
        "nested objects per document) instead of `object`",
    )

    @property
    def foreign_columns(self) -> list[str]:
        return _columns(self.foreign_key) if self.foreign_key is not None else []

    @property
    def referenced_columns(self) -> list[str] | None:
        return _columns(self.references) if self.references is not None else None

    @model_validator(mode="after")
    def _relation_complete(self) -> DocumentChildConfig:
        if self.relation == "many_to_many":
            if self.through is None:
                raise ValueError(
                    f"{self.table}: a many_to_many relation needs through: {{table: <join table>, parent_key: "
                    "<column>, child_key: <column>}}"
                )
            if self.foreign_key is not None:
                raise ValueError(f"{self.table}: a many_to_many relation takes its keys in through, not foreign_key")
        else:
            if self.foreign_key is None:
                side = "the child's column" if self.relation == "one_to_many" else "the parent's column"
                raise ValueError(f"{self.table}: a {self.relation} relation needs foreign_key: {side} that references")
            if self.through is not None:
                raise ValueError(f"{self.table}: through is for many_to_many only")
        if self.scalar is not None:
            if self.relation == "many_to_one":
                raise ValueError(f"{self.table}: scalar makes an array; a many_to_one relation holds one object")
            if self.children:
                raise ValueError(f"{self.table}: a scalar relation holds one column's values, so no children")
        if self.nested and self.relation == "many_to_one":
            raise ValueError(f"{self.table}: nested is for arrays of objects; a many_to_one relation holds one object")
        if self.nested and self.scalar is not None:
            raise ValueError(f"{self.table}: nested is for arrays of objects, not of scalar values")
        return self


class DocumentConfig(DocumentNodeConfig):
    """One document per row of ``table`` (its root), with its related tables nested under ``children``."""

    source: str | None = Field(None, description="the source of every table in it (default: the only source)")
    table: str = Field(min_length=1, description="the root table, `namespace.table`: one document per row")
    target: str | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,200}$",
        description="the index or key space of the documents (default: the document's name)",
    )

    @model_validator(mode="after")
    def _no_cycle(self) -> DocumentConfig:
        """Refuse a table met twice on one path from the root (a cycle) and a tree deeper than ``MAX_DEPTH``."""

        def walk(node: DocumentNodeConfig, path: list[str], tables: list[str]) -> None:
            if len(tables) > MAX_DEPTH + 1:
                raise ValueError(f"{'.'.join(path)}: deeper than {MAX_DEPTH} levels below the root")
            for name, child in node.children.items():
                here = [*path, "children", name]
                if child.table in tables:
                    raise ValueError(
                        f"{'.'.join(here)}: table {child.table} is already on the path from the root "
                        f"({' -> '.join(tables)}): a cycle; nest it once, or make the inner one a scalar or drop it"
                    )
                walk(child, here, [*tables, child.table])

        walk(self, [], [self.table])
        return self


DocumentNodeConfig.model_rebuild()
DocumentChildConfig.model_rebuild()
