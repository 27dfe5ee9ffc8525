"""From document ids back to the source rows they name: ``verify`` re-reads a row that moved, ``repair`` asks for it.

A document id is the text of each key column's canonical value, several
joined by '|' with '|' and the backslash escaped (``sync.mapping.doc_id``).
``key_parts`` splits it again, and ``key_filter`` turns ids into one SQL
condition with each part as a literal of unknown type, which the database
casts to the column's type (bytes, whose id is base64, are decoded). The
condition goes into a query of our own or, written as text, into a
Debezium snapshot signal's ``additional-conditions``.

An id whose text the database reads as another value (a timestamp with an
offset MariaDB drops, say) matches no row, or another; so a reader keeps
only the rows whose own id is one of those asked for (``rows_of``), and
a row not found counts as absent only where every key column is of a type
whose id text reads back exactly (``readable``: integers, text, decimals,
dates, uuids, bytes, or a type the catalog did not name); for other keys
``verify`` does not re-check rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from cdcsync.config import SourceConfig, TableRef
from cdcsync.sources import BAD_VALUE, kind_of
from cdcsync.sync.catalog import source_rows
from cdcsync.sync.mapping import TableMapping, doc_id
from cdcsync.sync.sink import batched

IDS_PER_QUERY = 1000
EXACT = frozenset({None, "int", "text", "decimal", "date", "uuid", "bytes"})  # types whose id text reads back


def readable(mapping: TableMapping) -> bool:
    """Whether a key's id finds its row and nothing else, so that a row not found is not there."""
    return bool(mapping.key_columns) and all(mapping.types.get(c) in EXACT for c in mapping.key_columns)


def key_parts(ident: str, columns: int) -> tuple[str, ...] | None:
    """The key columns' texts of a document id of ``columns`` columns; None when it has another number."""
    if columns == 1:
        return (ident,)
    parts, part, escaped = [], [], False
    for char in ident:
        if escaped:
            part.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "|":
            parts.append("".join(part))
            part = []
        else:
            part.append(char)
    parts.append("".join(part))
    return tuple(parts) if len(parts) == columns and not escaped else None


def key_filter(kind: str, mapping: TableMapping, ids: Iterable[str]) -> str | None:
    """A SQL condition true for the rows of these ids (``kind``: postgres or mariadb); None for no id or key."""
    columns = mapping.key_columns
    if not columns:
        return None
    dialect = kind_of(kind)
    names = [dialect.quote(column) for column in columns]
    values = []
    for ident in ids:
        parts = key_parts(ident, len(columns))
        if parts is None:
            continue
        literals = [
            dialect.bytes_literal(part) if mapping.types.get(c) == "bytes" else dialect.text_literal(part)
            for c, part in zip(columns, parts, strict=True)
        ]
        values.append(literals[0] if len(literals) == 1 else f"({', '.join(literals)})")
    if not values:
        return None
    left = names[0] if len(names) == 1 else f"({', '.join(names)})"
    return f"{left} IN ({', '.join(values)})"


def rows_of(
    source: SourceConfig, table: TableRef, mapping: TableMapping, ids: Iterable[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(id, row)`` for each of ``ids`` that the source table holds now, read ``IDS_PER_QUERY`` ids a query.

    An id the database cannot read as a value of the key's type (a stray document ``orphan-1`` in a store
    of an integer key, a number past the column's range) fails its query: the ids are then asked again in
    halves, and one that fails alone names no row.
    """
    for chunk in batched(ids, IDS_PER_QUERY):
        yield from _rows(source, table, mapping, chunk)


def _rows(
    source: SourceConfig, table: TableRef, mapping: TableMapping, ids: list[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    where = key_filter(source.kind, mapping, ids)
    if where is None:
        return
    try:
        found = list(source_rows(source, table, where))
    except BAD_VALUE:
        if len(ids) > 1:
            half = len(ids) // 2
            yield from _rows(source, table, mapping, ids[:half])
            yield from _rows(source, table, mapping, ids[half:])
        return
    asked = set(ids)
    for row in found:
        ident = doc_id(row, mapping)
        if ident in asked:
            yield ident, row
