"""Mapping a change to a sink row: target name, document id, fields, natural types.

Debezium's schemaless JSON carries decimals as strings, temporal values as ISO
strings and JSON columns as text (docs/capture.md). The column types come from
the source's catalog (``sync.catalog``) unless the mapping overrides them, and
each value is converted to one canonical Python value that every sink encodes
in its own natural way:

=============  =========================  ===================================  ====================================
type           canonical Python value     from Debezium's JSON                 in a document id
=============  =========================  ===================================  ====================================
``decimal``    ``decimal.Decimal`` exact  ``"12.50"``                          ``12.50`` (never an exponent)
``date``       ``datetime.date``          ``"2024-02-29Z"``                    ``2024-02-29``
``time``       ``datetime.time``          ``"13:45:30.123456Z"``               ``13:45:30.123456``
``timestamp``  aware ``datetime`` in UTC  ``"2024-02-29T11:45:30.123456Z"``    ``2024-02-29T11:45:30.123456+00:00``
``json``       dict / list / scalar       ``"{\"a\": 1}"``                     ``str(value)``
``bytes``      ``bytes``                  base64 text                          base64 text
``bool``       ``bool``                   ``true`` or ``1`` (MariaDB BOOLEAN)  ``str(value)`` as read
``uuid``       ``str`` (canonical form)   ``"a0ee..."``                        ``a0ee...`` (lower case)
``float``      ``float``, NaN and ±inf    ``1.5``, ``"NaN"``, ``"-Infinity"``  ``str(value)``
``point``      dict ``{x, y, wkb, srid}``     the same struct                      (never a key)
``geometry``   dict ``{wkb, srid}``           the same struct                      (never a key)
``interval``   ``str`` in Debezium's form   ``"P0Y1M-2DT0H0M1.5S"``              the same text
other          unchanged                  numbers, text, arrays                ``str(value)``: ``7``, ``abc``
=============  =========================  ===================================  ====================================

``canonical_value`` turns a value read straight from the source database into
the same form, which is what ``verify`` compares. ``doc_id`` does the same for
the primary key, so a row has one id whether it was streamed, bootstrapped
from the topics or from the source, or read by ``verify``.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, get_args

import orjson

from cdcsync.config import MappingType
from cdcsync.events import Change, PoisonRecord
from cdcsync.sync.sink import Row

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
    filled: frozenset[str] = frozenset()  # columns the source fills in rows nobody wrote them in (sync.rebuild)
    dropped: frozenset[str] = frozenset()
    may_lack: frozenset[str] = frozenset()
    # column -> (field name, type, converter or None); what map_row looks up once per column of a change
    plan: Mapping[str, tuple[str, str | None, Any]] = field(init=False, repr=False, compare=False)
    # (key column, type, id text function or None for str), in key order; what doc_id looks up per change
    key_plan: tuple[tuple[str, str | None, Any], ...] = field(init=False, repr=False, compare=False)
    plain_key: str | None = field(init=False, repr=False, compare=False)  # the one key column, if its id is str()

    def __post_init__(self) -> None:
        columns = self.include if self.include is not None else (*self.types, *sorted(self.untyped - set(self.types)))
        kinds = {c: self.types.get(c) for c in columns}
        plan = {c: (self.rename.get(c, c), kind, _CONVERTERS.get(kind or "")) for c, kind in kinds.items()}
        object.__setattr__(self, "plan", plan)
        key_plan = tuple(_key_step(c, self.types) for c in self.key_columns)
        object.__setattr__(self, "key_plan", key_plan)
        object.__setattr__(self, "plain_key", key_plan[0][0] if len(key_plan) == 1 and key_plan[0][2] is None else None)


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
    plan = mapping.key_plan or tuple(_key_step(c, mapping.types) for c in key)  # no primary key: the key's own
    if len(plan) == 1:
        return _key_part(key, plan[0], mapping)
    parts = (_key_part(key, step, mapping) for step in plan)
    return "|".join(p.replace("\\", "\\\\").replace("|", "\\|") for p in parts)


def _key_step(column: str, types: Mapping[str, str]) -> tuple[str, str | None, Any]:
    kind = types.get(column)
    return column, kind, _KEY_TEXT.get(kind or "")


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


# Postgres' 'infinity' and '-infinity' have no Python value (nor one in Delta or Elasticsearch): they are the
# largest and smallest value every store holds (docs/types.md). As Debezium sends them (a timestamp's
# microseconds overflow, a date's days overflow), and as Postgres writes them (timestamptz, the source copy).
LATEST = datetime.max.replace(tzinfo=UTC)
EARLIEST = datetime.min.replace(tzinfo=UTC)
_FAR_TIMESTAMPS = {
    "infinity": LATEST,
    "-infinity": EARLIEST,
    "+294247-01-10T04:00:25.2Z": LATEST,
    "-290308-12-21T19:59:27.6Z": EARLIEST,
}
_FAR_DATES = {
    "infinity": date.max,
    "-infinity": date.min,
    "-5877611-06-21": date.max,  # streamed (pgoutput's text, overflowed)
    "-5877611-06-22": date.min,
    "+292278994-08-16": date.max,  # the initial snapshot (pgjdbc's stand-ins for the infinities)
    "+292269055-12-02": date.min,
}


def _date(value: str) -> date:
    text = value.removesuffix("Z")
    try:
        return date.fromisoformat(text)
    except ValueError:
        if text in _FAR_DATES:
            return _FAR_DATES[text]
        raise


def _time(value: str) -> time:
    return time.fromisoformat(value.removesuffix("Z"))


def _timestamp(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        if value in _FAR_TIMESTAMPS:
            return _FAR_TIMESTAMPS[value]
        raise
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


# Postgres numeric's infinities (14+), as Debezium's string mode sends them; its NaN arrives as "NAN".
_FAR_DECIMALS = {"POSITIVE_INFINITY": Decimal("Infinity"), "NEGATIVE_INFINITY": Decimal("-Infinity")}


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(value)
    except ArithmeticError:
        if value in _FAR_DECIMALS:
            return _FAR_DECIMALS[value]
        raise


def _json_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _uuid(value: Any) -> str:
    return str(uuid.UUID(str(value)))


def _point(value: Any) -> dict[str, Any]:
    """Debezium's struct for a point, as is; a Postgres point's text (a source copy) -> it."""
    return value if isinstance(value, dict) else _spatial(value, point=True)


def _spatial(value: Any, point: bool) -> dict[str, Any]:
    """A driver's spatial value -> Debezium's struct: ``{wkb, srid}``, and ``x``, ``y`` for a point column.

    Postgres ``point`` reads as ``(x,y)``; MariaDB's spatial values as its storage form, a little-endian
    SRID then the WKB. Debezium sends the WKB in base64, no SRID (null) for 0, and x and y only for a
    column declared POINT (a GEOMETRY column holding a point has none).
    """
    if isinstance(value, str):  # Postgres point
        x, y = (float(part) for part in value.strip("()").split(","))
        return {"x": x, "y": y, "wkb": base64.b64encode(struct.pack("<BIdd", 1, 1, x, y)).decode(), "srid": None}
    raw = bytes(value)
    wkb, srid = raw[4:], int.from_bytes(raw[:4], "little") or None
    out: dict[str, Any] = {"wkb": base64.b64encode(wkb).decode(), "srid": srid}
    if point:
        out["x"], out["y"] = struct.unpack("<dd" if wkb[:1] == b"\x01" else ">dd", wkb[5:21])
    return out


_DURATION = re.compile(
    r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?"
)


def _interval(value: str) -> str:
    """An ISO 8601 duration -> Debezium's form of it, every part written: ``P0Y1M-2DT0H0M1.5S``.

    Debezium sends a Postgres interval so (``interval.handling.mode=string``); Postgres itself, with
    ``IntervalStyle = 'iso_8601'`` (verify, a source copy), leaves out the zero parts and counts weeks.
    Months and days stay apart from each other and from the time: an interval has no fixed length.
    """
    found = _DURATION.fullmatch(value)
    if found is None:
        raise ValueError(f"{value!r} is not an ISO 8601 duration")
    years, months, weeks, days, hours, minutes = (int(part or 0) for part in found.groups()[:6])
    seconds = Decimal(found.group(7) or 0).normalize()
    return f"P{years}Y{months}M{days + 7 * weeks}DT{hours}H{minutes}M{format(seconds, 'f')}S"


def _float(value: Any) -> float:
    # Debezium sends NaN and the infinities of float4/float8 as the strings "NaN", "Infinity", "-Infinity".
    return value if type(value) is float else float(value)


# Debezium JSON value -> canonical Python value, per type; types not listed pass unchanged.
_CONVERTERS: dict[str, Any] = {
    "decimal": _decimal,
    "date": _date,
    "time": _time,
    "timestamp": _timestamp,
    "json": _json_value,
    "bytes": base64.b64decode,
    "bool": bool,
    "uuid": _uuid,
    "float": _float,
    "point": _point,
    "interval": _interval,
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
    if kind == "interval" and isinstance(value, str):
        return _interval(value)
    if kind in ("point", "geometry"):
        return _spatial(value, point=kind == "point")
    return value


def _date_key(value: Any) -> str:
    return str((_date(value) if isinstance(value, str) else value).isoformat())


def _time_key(value: Any) -> str:
    return str((_time(value) if isinstance(value, str) else canonical_value(value, "time")).isoformat())


def _timestamp_key(value: Any) -> str:
    return str((_timestamp(value) if isinstance(value, str) else canonical_value(value, "timestamp")).isoformat())


def _bytes_key(value: Any) -> str:
    raw = base64.b64decode(value, validate=True) if isinstance(value, str) else bytes(value)
    return base64.b64encode(raw).decode()


def _decimal_key(value: Any) -> str:
    return format(value if isinstance(value, Decimal) else _decimal(value), "f")


# Key value (Debezium's JSON or a driver's) -> its id text, per type; str() for types not listed (int, text).
# Each is the text scalar_text gives for the canonical value: what the sinks store in the key's own field.
_KEY_TEXT: dict[str, Any] = {
    "date": _date_key,
    "time": _time_key,
    "timestamp": _timestamp_key,
    "bytes": _bytes_key,
    "decimal": _decimal_key,
    "uuid": _uuid,
}


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
            if every_column and column not in mapping.dropped:
                doc[mapping.rename.get(column, column)] = value
            continue
        name, kind, converter = step
        doc[name] = value if converter is None or value is None else _converted(value, kind, converter)
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
