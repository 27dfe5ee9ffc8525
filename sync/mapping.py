"""Mapping a change to a sink row (``Row``): target name, document id, fields.

Each column's value is converted by its type to one canonical Python value
(``sync.values``, which lists the types); ``doc_id`` makes a row's id from
its key the same way whichever path read it. ``canonical_doc`` maps a row
read from the source database like ``map_row`` maps a change, which is what
``verify`` compares.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from functools import partial
from typing import Any, get_args

import orjson

from cdcsync.config import MappingType
from cdcsync.events import Change, PoisonRecord
from cdcsync.sync.values import (
    BAD_VALUE,
    CONVERTERS,
    KEY_TEXT,
    bits_text,
    canonical_value,
    converted,
    decimal_text,
    timestamp_millis,
    timestamp_millis_key,
)


@dataclass(slots=True)
class Row:
    """A change mapped for a sink: its target, document id and document (None for deletes).

    Never modified once built; not ``frozen`` for the same reason as ``Change``.
    """

    change: Change
    target: str  # index / table / key namespace
    doc_id: str
    doc: dict[str, Any] | None

    @property
    def version(self) -> int:
        return self.change.version


TYPES = frozenset(get_args(MappingType))


@dataclass(frozen=True)
class TableMapping:
    table: str  # source "namespace.table"
    target: str
    key_columns: tuple[str, ...] = ()
    include: tuple[str, ...] | None = None  # None: every column
    rename: Mapping[str, str] = field(default_factory=dict)
    types: Mapping[str, str] = field(default_factory=dict)  # column -> one of TYPES
    # What a running follower learned of the table's shape since (docs/schema-changes.md): columns changes
    # carry that the catalog does not list (kept as they are), columns the table lost (older changes that
    # still carry them write them no more), columns the catalog lists that changes may lack (written before
    # an ADD COLUMN, or a mapping's type for a column the source does not have).
    untyped: frozenset[str] = frozenset()
    filled: frozenset[str] = frozenset()  # columns the source fills in rows nobody wrote them in (sync.reindex_needed)
    dropped: frozenset[str] = frozenset()
    may_lack: frozenset[str] = frozenset()
    # Generated columns: the source computes them, Postgres never logs them (before 18), so no store keeps them
    # and ``verify`` leaves them out of the source's rows too (docs/types.md, "Generated columns").
    unlogged: frozenset[str] = frozenset()
    # timestamp columns whose Debezium form counts milliseconds, not microseconds (MariaDB DATETIME(0) to (3))
    millis: frozenset[str] = frozenset()
    # decimal columns whose every value fits DECIMAL(precision, scale) with precision <= 38 (MariaDB DECIMAL(p,s),
    # BIGINT UNSIGNED): the Delta column's type. Other decimals (Postgres numeric holds NaN) are exact text there.
    decimals: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    widths: Mapping[str, int] = field(default_factory=dict)  # bit(n) columns' n: Debezium's bytes drop leading zeros
    # Explicit mappings of fields no column makes, by field name: a document's nested arrays (sync.documents)
    field_mappings: Mapping[str, Any] = field(default_factory=dict)
    # column -> (field name, type, converter or None); what map_row looks up once per column of a change
    plan: Mapping[str, tuple[str, str | None, Any]] = field(init=False, repr=False, compare=False)
    # (key column, type, id text function or None for str), in key order; what doc_id looks up per change
    key_plan: tuple[tuple[str, str | None, Any], ...] = field(init=False, repr=False, compare=False)
    plain_key: str | None = field(init=False, repr=False, compare=False)  # the one key column, if its id is str()

    def __post_init__(self) -> None:
        columns = self.include if self.include is not None else (*self.types, *sorted(self.untyped - set(self.types)))
        kinds = {c: self.types.get(c) for c in columns}
        plan = {c: (self.rename.get(c, c), kind, _converter(c, kind, self)) for c, kind in kinds.items()}
        object.__setattr__(self, "plan", plan)
        key_plan = tuple(_key_step(c, self) for c in self.key_columns)
        object.__setattr__(self, "key_plan", key_plan)
        object.__setattr__(self, "plain_key", key_plan[0][0] if len(key_plan) == 1 and key_plan[0][2] is None else None)

    def field(self, column: str) -> str:
        """The field (document field, hash field, table column) ``column`` becomes in every sink."""
        return self.rename.get(column, column)

    def fields(self) -> dict[str, tuple[str, str | None]]:
        """Each column a change's document holds, as its field and its type: ``plan`` without the converters."""
        return {column: (name, kind) for column, (name, kind, _) in self.plan.items()}


def doc_id(key: Mapping[str, Any], mapping: TableMapping) -> str:
    """The document id of a row from its primary key: the same text whichever path read the key.

    The one id function of streaming, both bootstraps and ``verify``. ``key``
    holds Debezium's key JSON (ISO text for dates and times, base64 for
    bytes, text for decimals) or what a database driver returned (``date``,
    ``datetime``, ``timedelta``, ``bytes``, ``UUID``...). Each key column
    becomes the text of its canonical value by the column's type (the ``id``
    column of the module docstring's table); integers and text stay
    ``str(value)``. Several columns are joined by '|', each with '|' and
    the backslash escaped.

    A key without one of the catalog's key columns (the primary key changed
    since the follower read the catalog, or ``message.key.columns`` names
    other columns) is a ``PoisonRecord``: no id made from it would match the
    stored ones.
    """
    if mapping.plain_key is not None:  # one integer or text column: the common case, kept short
        try:
            return str(key[mapping.plain_key])
        except KeyError:
            pass  # _key_value says why
    plan = mapping.key_plan or tuple(_key_step(c, mapping) for c in key)  # no primary key: the key's own
    if len(plan) == 1:
        return _key_part(key, plan[0], mapping)
    parts = (_key_part(key, step, mapping) for step in plan)
    return "|".join(p.replace("\\", "\\\\").replace("|", "\\|") for p in parts)


def _converter(column: str, kind: str | None, mapping: TableMapping) -> Any:
    """The column's Debezium value -> canonical value function, where it depends on more than the type."""
    if kind == "timestamp" and column in mapping.millis:
        return timestamp_millis
    if kind == "bits":
        return partial(bits_text, width=mapping.widths.get(column))
    return CONVERTERS.get(kind or "")


def _key_step(column: str, mapping: TableMapping) -> tuple[str, str | None, Any]:
    kind = mapping.types.get(column)
    if kind == "timestamp" and column in mapping.millis:
        return column, kind, timestamp_millis_key
    if kind == "bits":
        return column, kind, partial(bits_text, width=mapping.widths.get(column))
    return column, kind, KEY_TEXT.get(kind or "")


def _key_part(key: Mapping[str, Any], step: tuple[str, str | None, Any], mapping: TableMapping) -> str:
    column, kind, text = step
    value = _key_value(key, column, mapping)
    if text is None or value is None:
        return str(value)
    try:
        return str(text(value))
    except BAD_VALUE as err:
        raise PoisonRecord(f"table {mapping.table}: key {column}={value!r} is not a valid {kind}: {err}") from None


def _key_value(key: Mapping[str, Any], column: str, mapping: TableMapping) -> Any:
    try:
        return key[column]
    except KeyError:
        raise PoisonRecord(
            f"table {mapping.table}: the record's key {sorted(key)} lacks {column!r}, a column of the primary key"
            f" {list(mapping.key_columns)} read from the catalog: the table's primary key changed (or the"
            f" connector's message.key.columns names other columns); run"
            f" `cdcsync reindex <follower> --table {mapping.table}` to rebuild its store on the new key"
        ) from None


# Debezium's stand-in for a value Postgres did not log (an unchanged TOAST value under a replica identity other
# than FULL), as the connector templates set it: text, bytea in base64, and an array's.
PLACEHOLDER = "__debezium_unavailable_value"
_PLACEHOLDER_BYTES = base64.b64encode(PLACEHOLDER.encode()).decode()
PLACEHOLDERS = (PLACEHOLDER, _PLACEHOLDER_BYTES, [PLACEHOLDER])


def map_row(change: Change, mapping: TableMapping) -> Row:
    """Apply a table's mapping to a change (deletes carry no document).

    A change that carries Debezium's placeholder instead of a value is a
    ``PoisonRecord``: written, it would overwrite the stored value with the
    placeholder. ``connectors apply`` sets the identity that prevents it
    (``connectors.source_setup``); this catches a table changed since.
    """
    ident = doc_id(change.key, mapping)
    if change.after is None:
        return Row(change, mapping.target, ident, None)
    values = change.after.values()  # three scans in C per change, no generator: this runs for every change
    if PLACEHOLDER in values or _PLACEHOLDER_BYTES in values or [PLACEHOLDER] in values:
        raise PoisonRecord(_placeholder_reason(change, mapping))
    doc: dict[str, Any] = {}
    plan, every_column = mapping.plan, mapping.include is None
    for column, value in change.after.items():
        step = plan.get(column)
        if step is None:  # not in the catalog's types when the mapping was built (a column added since)
            if every_column and column not in mapping.dropped and column not in mapping.unlogged:
                doc[mapping.field(column)] = value
            continue
        name, kind, converter = step
        doc[name] = value if converter is None or value is None else converted(value, kind, converter)
    return Row(change, mapping.target, ident, doc)


def _placeholder_reason(change: Change, mapping: TableMapping) -> str:
    columns = sorted(c for c, v in (change.after or {}).items() if any(v == p for p in PLACEHOLDERS))
    return (
        f"table {mapping.table}: columns {columns} carry Debezium's placeholder for a value Postgres did not log "
        "(an UPDATE left a large value alone and the table's REPLICA IDENTITY is not FULL); writing it would "
        "overwrite the stored value. Run `cdcsync connectors apply` (it sets REPLICA IDENTITY FULL), then "
        f"`cdcsync connectors snapshot <source> --table {mapping.table}` to read the rows again"
    )


def canonical_doc(row: Mapping[str, Any], mapping: TableMapping) -> dict[str, Any]:
    """A source row (column -> value from the database driver) mapped like ``map_row`` maps a change."""
    doc = {}
    plan, widths, every = mapping.plan, mapping.widths, mapping.include is None
    for column, value in row.items():  # once per value of every row of a verify: kept to lookups
        step = plan.get(column)
        if step is None and (not every or column in mapping.unlogged):
            continue
        name, kind = (mapping.field(column), None) if step is None else step[:2]
        doc[name] = None if value is None else canonical_value(value, kind, widths.get(column))
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
    return json.dumps(doc, sort_keys=True, default=plain, separators=(",", ":"))


def fingerprint_bytes(doc: Mapping[str, Any]) -> bytes:
    """Bytes equal for two documents exactly when their ``fingerprint``s are, made some times faster (orjson):
    for comparing (``verify``), never stored. orjson writes a non-finite float as null, and refuses an
    integer past 64 bits: a document whose bytes hold a null is fingerprinted the slow way (``verify``
    leaves None out of a document, so a null is rare)."""
    try:
        text = orjson.dumps(doc, default=plain, option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME)
    except TypeError:  # orjson.JSONEncodeError is one
        return fingerprint(doc).encode()
    return fingerprint(doc).encode() if b"null" in text else text


def plain(value: Any) -> Any:
    """A value JSON has no form for as the text a fingerprint (and a stored JSON value) holds."""
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot fingerprint {type(value).__name__}")
