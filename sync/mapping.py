"""Mapping a change to a sink row: target name, document id, fields, natural types.

Debezium's schemaless JSON carries decimals as strings, temporal values as ISO
strings and JSON columns as text (docs/capture.md). The column types come from
the source's catalog (``sync.catalog``) unless the mapping overrides them, and
each value is converted to one canonical Python value that every sink encodes
in its own natural way:

=============  ==========================  ==================================
type           canonical Python value      from Debezium's JSON
=============  ==========================  ==================================
``decimal``    ``decimal.Decimal`` exact   ``"12.50"``
``date``       ``datetime.date``           ``"2024-02-29Z"``
``time``       ``datetime.time``           ``"13:45:30.123456Z"``
``timestamp``  aware ``datetime`` in UTC   ``"2024-02-29T11:45:30.123456Z"``
``json``       dict / list / scalar        ``"{\"a\": 1}"``
``bytes``      ``bytes``                   base64 text
``bool``       ``bool``                    ``true`` or ``1`` (MariaDB BOOLEAN)
``uuid``       ``str`` (canonical form)    ``"a0ee..."``
other          unchanged                   numbers, text, arrays
=============  ==========================  ==================================

``canonical_value`` turns a value read straight from the source database into
the same form, which is what ``verify`` compares.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

from cdcsync.events import Change, PoisonRecord
from cdcsync.sync.sink import Row

TYPES = {"decimal", "date", "time", "timestamp", "json", "bytes", "bool", "uuid", "int", "float", "text", "array"}


@dataclass(frozen=True)
class TableMapping:
    table: str  # source "namespace.table"
    target: str
    key_columns: tuple[str, ...] = ()
    include: tuple[str, ...] | None = None  # None: every column
    rename: Mapping[str, str] = field(default_factory=dict)
    types: Mapping[str, str] = field(default_factory=dict)  # column -> one of TYPES


def doc_id(key: Mapping[str, Any], key_columns: tuple[str, ...] = ()) -> str:
    """The document id from the primary key: one value as is, several joined by '|' (escaped)."""
    columns = key_columns or tuple(key)
    values = [key[c] for c in columns]
    if len(values) == 1:
        return str(values[0])
    return "|".join(str(v).replace("\\", "\\\\").replace("|", "\\|") for v in values)


def convert(value: Any, kind: str | None) -> Any:
    """Debezium JSON value -> canonical Python value for the column's type."""
    if value is None or kind is None:
        return value
    try:
        if kind == "decimal":
            return Decimal(value)
        if kind == "date":
            return date.fromisoformat(value.removesuffix("Z"))
        if kind == "time":
            return time.fromisoformat(value.removesuffix("Z"))
        if kind == "timestamp":
            parsed = datetime.fromisoformat(value)
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
        if kind == "json":
            return json.loads(value) if isinstance(value, str) else value
        if kind == "bytes":
            return base64.b64decode(value)
        if kind == "bool":
            return bool(value)
        if kind == "uuid":
            return str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError) as err:
        raise PoisonRecord(f"value {value!r} is not a valid {kind}: {err}") from None
    return value


def canonical_value(value: Any, kind: str | None) -> Any:
    """A value read from the source database -> the canonical form ``convert`` produces."""
    if value is None:
        return None
    if kind == "timestamp" and isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    if kind == "time" and not isinstance(value, time):
        # MariaDB returns TIME as a timedelta.
        seconds = value.total_seconds()
        return time(int(seconds // 3600), int(seconds % 3600 // 60), int(seconds % 60), value.microseconds)
    if kind == "time" and isinstance(value, time) and value.tzinfo:
        return value.replace(tzinfo=None)
    if kind == "json" and isinstance(value, str):
        return json.loads(value)
    if kind == "bytes" and isinstance(value, memoryview | bytearray):
        return bytes(value)
    if kind == "bool":
        return bool(value)
    if kind == "uuid":
        return str(value)
    if kind == "decimal":
        return Decimal(value)
    return value


def map_row(change: Change, mapping: TableMapping) -> Row:
    """Apply a table's mapping to a change (deletes carry no document)."""
    ident = doc_id(change.key, mapping.key_columns)
    if change.after is None:
        return Row(change, mapping.target, ident, None)
    doc: dict[str, Any] = {}
    for column, value in change.after.items():
        if mapping.include is not None and column not in mapping.include:
            continue
        doc[mapping.rename.get(column, column)] = convert(value, mapping.types.get(column))
    return Row(change, mapping.target, ident, doc)


def canonical_doc(row: Mapping[str, Any], mapping: TableMapping) -> dict[str, Any]:
    """A source row (column -> value from the database driver) mapped like ``map_row`` maps a change."""
    doc = {}
    for column, value in row.items():
        if mapping.include is not None and column not in mapping.include:
            continue
        doc[mapping.rename.get(column, column)] = canonical_value(value, mapping.types.get(column))
    return doc


def scalar_text(value: Any) -> str | None:
    """The exact text a sink stores for a decimal, temporal or binary value; None for any other value."""
    if isinstance(value, Decimal):
        return format(value, "f")  # exact digits, trailing zeros kept, never an exponent
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return None


def fingerprint(doc: Mapping[str, Any]) -> str:
    """A stable text form of a canonical document, for hashing and comparing across stores."""
    return json.dumps(doc, sort_keys=True, default=_plain, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value == value.to_integral_value() else str(value.normalize())
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot fingerprint {type(value).__name__}")
