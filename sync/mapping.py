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

import orjson

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
    # column -> (field name, type, converter or None); what map_row looks up once per column of a change
    plan: Mapping[str, tuple[str, str | None, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        columns = self.include if self.include is not None else tuple(self.types)
        kinds = {c: self.types.get(c) for c in columns}
        plan = {c: (self.rename.get(c, c), kind, _CONVERTERS.get(kind or "")) for c, kind in kinds.items()}
        object.__setattr__(self, "plan", plan)


def doc_id(key: Mapping[str, Any], key_columns: tuple[str, ...] = ()) -> str:
    """The document id from the primary key: one value as is, several joined by '|' (escaped)."""
    if len(key_columns) == 1:
        return str(key[key_columns[0]])
    values = [key[c] for c in key_columns or tuple(key)]
    if len(values) == 1:
        return str(values[0])
    return "|".join(str(v).replace("\\", "\\\\").replace("|", "\\|") for v in values)


def _date(value: str) -> date:
    return date.fromisoformat(value.removesuffix("Z"))


def _time(value: str) -> time:
    return time.fromisoformat(value.removesuffix("Z"))


def _timestamp(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _json_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _uuid(value: Any) -> str:
    return str(uuid.UUID(str(value)))


# Debezium JSON value -> canonical Python value, per type; types not listed pass unchanged.
_CONVERTERS: dict[str, Any] = {
    "decimal": Decimal,
    "date": _date,
    "time": _time,
    "timestamp": _timestamp,
    "json": _json_value,
    "bytes": base64.b64decode,
    "bool": bool,
    "uuid": _uuid,
}
# What a malformed value raises: Decimal's InvalidOperation is an ArithmeticError, not a ValueError.
BAD_VALUE = (ValueError, TypeError, AttributeError, ArithmeticError)


def convert(value: Any, kind: str | None) -> Any:
    """Debezium JSON value -> canonical Python value for the column's type."""
    converter = _CONVERTERS.get(kind or "")
    if value is None or converter is None:
        return value
    return _converted(value, kind, converter)


def _converted(value: Any, kind: str | None, converter: Any) -> Any:
    try:
        return converter(value)
    except BAD_VALUE as err:
        raise PoisonRecord(f"value {value!r} is not a valid {kind}: {err}") from None


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
    plan, every_column = mapping.plan, mapping.include is None
    for column, value in change.after.items():
        step = plan.get(column)
        if step is None:  # not in the catalog's types when the mapping was built (a column added since)
            if every_column:
                doc[mapping.rename.get(column, column)] = value
            continue
        name, kind, converter = step
        doc[name] = value if converter is None or value is None else _converted(value, kind, converter)
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
        if type(value) is datetime and value.tzinfo is UTC:  # what convert() produces: already canonical
            return orjson.dumps(value)[1:-1].decode()  # isoformat()'s text (unit-tested), in a fifth of its time
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
