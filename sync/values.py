"""Column values: Debezium's JSON and a database driver's values -> one canonical Python value per type.

Debezium's schemaless JSON carries decimals as strings, temporal values as ISO
strings or counts (docs/capture.md) and JSON columns as text. The column types
come from the source's catalog (``sync.catalog``) unless the mapping overrides
them; each value becomes one canonical Python value that every sink encodes in
its own natural way:

=============  =========================  ===================================  ====================================
type           canonical Python value     from Debezium's JSON                 in a document id
=============  =========================  ===================================  ====================================
``decimal``    ``decimal.Decimal`` exact  ``"12.50"``                          ``12.50`` (never an exponent)
``date``       ``datetime.date``          ``"2024-02-29Z"``, MariaDB days       ``2024-02-29``
``time``       ``datetime.time``          ``"13:45:30.123456Z"``               ``13:45:30.123456``
``timestamp``  aware ``datetime`` in UTC  ``"2024-02-29T11:45:30.123456Z"``,   ``2024-02-29T11:45:30.123456+00:00``
                                          MariaDB ms or µs (by precision)
``json``       dict / list / scalar       ``"{\"a\": 1}"``                     ``str(value)``
``bytes``      ``bytes``                  base64 text                          base64 text
``bool``       ``bool``                   ``true`` or ``1`` (MariaDB BOOLEAN)  ``str(value)`` as read
``uuid``       ``str`` (canonical form)   ``"a0ee..."``                        ``a0ee...`` (lower case)
``float``      ``float``, NaN and ±inf    ``1.5``, ``"NaN"``, ``"-Infinity"``  ``str(value)``
``point``      dict ``{x, y, wkb, srid}``     the same struct                      (never a key)
``geometry``   dict ``{wkb, srid}``           the same struct                      (never a key)
``interval``   ``str`` in Debezium's form   ``"P0Y1M-2DT0H0M1.5S"``              the same text
``duration``   ``str`` as MariaDB shows it  microseconds: ``-3600000000``       ``-01:00:00``
``pg_text``    ``str``: Postgres' text      base64 of that text                  (not a key)
``geometric``  ``str``, numbers as floats   base64 of the driver's text          (not a key)
other          unchanged                  numbers, text, arrays                ``str(value)``: ``7``, ``abc``
=============  =========================  ===================================  ====================================

``convert`` reads Debezium's form, ``canonical_value`` a driver's (what
``verify`` compares), ``KEY_TEXT`` a key column's id text (``sync.mapping``).
"""

from __future__ import annotations

import base64
import json
import re
import struct
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Any

from cdcsync.events import PoisonRecord
from cdcsync.sync.far_time import date_of_days, far_date, far_timestamp

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


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DAY = EPOCH.date()
MICROSECOND = timedelta(microseconds=1)


def _date(value: str | int) -> date | str:
    if isinstance(value, int):  # MariaDB's under time.precision.mode=adaptive_time_microseconds: days since 1970
        return date_of_days(value)
    text = value.removesuffix("Z")
    try:
        return date.fromisoformat(text)
    except ValueError:
        if text in _FAR_DATES:
            return _FAR_DATES[text]
        return far_date(text)  # before year 1 or after 9999: its text (sync.far_time)


def _time(value: str) -> time:
    return time.fromisoformat(value.removesuffix("Z"))


def _timestamp(value: str | int) -> datetime | str:
    if isinstance(value, int):  # MariaDB's DATETIME(4) to (6): microseconds since 1970, in UTC as written
        return EPOCH + value * MICROSECOND
    if value in _FAR_TIMESTAMPS:
        return _FAR_TIMESTAMPS[value]
    try:
        parsed = datetime.fromisoformat(value)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):  # before year 1 or after 9999, in UTC or as written: its text
        return far_timestamp(value)


def timestamp_millis(value: str | int) -> datetime | str:
    """A MariaDB DATETIME(0) to (3): milliseconds since 1970 (or the ISO text an older connector config sent)."""
    return EPOCH + timedelta(milliseconds=value) if isinstance(value, int) else _timestamp(value)


def timestamp_millis_key(value: Any) -> str:
    return _iso(timestamp_millis(value) if isinstance(value, str | int) else canonical_value(value, "timestamp"))


def _iso(value: date | datetime | str) -> str:
    """A date's or timestamp's id text: its ISO text (a far one is already text)."""
    return value if isinstance(value, str) else value.isoformat()


_TIME_TEXT = re.compile(r"(-?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?Z?")


def _duration(value: Any) -> str:
    """A MariaDB TIME (-838:59:59.999999 to 838:59:59.999999) -> the text MariaDB shows: ``-01:00:00.5``.

    Debezium sends microseconds (``time.precision.mode=adaptive_time_microseconds``; ``isostring`` sent a
    time of day, null past 24 h); the driver a ``timedelta``; a JDBC read and an older connector config text.
    Within a day it is the text of a ``time`` value: ``13:45:30``, ``13:45:30.123456``.
    """
    if isinstance(value, timedelta):
        value = value // MICROSECOND
    if isinstance(value, time):
        value = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, str):
        found = _TIME_TEXT.fullmatch(value)
        if found is None:
            raise ValueError(f"{value!r} is not a time")
        sign, hours, minutes, seconds, fraction = found.groups()
        micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int(
            (fraction or "").ljust(6, "0")
        )
        value = -micros if sign else micros
    if not isinstance(value, int):
        raise TypeError(f"{type(value).__name__} is not a time")
    sign = "-" if value < 0 else ""
    seconds, fraction = divmod(abs(value), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


# Postgres numeric's infinities (14+), as Debezium's string mode sends them; its NaN arrives as "NAN".
_FAR_DECIMALS = {"POSITIVE_INFINITY": Decimal("Infinity"), "NEGATIVE_INFINITY": Decimal("-Infinity")}


# Postgres money as its driver reads it in the C locale (lc_monetary = 'C', set by verify and a source copy).
_MONEY_TEXT = re.compile(r"(-?)\$([\d,]+(?:\.\d+)?)")


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(value)
    except ArithmeticError:
        if value in _FAR_DECIMALS:
            return _FAR_DECIMALS[value]
        money = _MONEY_TEXT.fullmatch(value) if isinstance(value, str) else None
        if money:
            return Decimal(money.group(1) + money.group(2).replace(",", ""))
        raise


# Postgres' numeric holds up to 131072 digits before the point and 16383 after it: none is rounded away.
EXACT = Context(prec=131072 + 16383, Emax=MAX_EMAX, Emin=MIN_EMIN)


def decimal_text(value: Decimal) -> str:
    """One text per decimal value, never in exponent form: ``12.50`` -> ``12.5``, ``1E+2`` -> ``100``, ``NaN``."""
    if not value.is_finite():
        return str(value)  # NaN, Infinity, -Infinity
    return "0" if value.is_zero() else format(value.normalize(EXACT), "f")


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


def _pg_text(value: Any) -> str:
    """Postgres' text of a value Debezium has no form for (a box, a composite...): it sends the text's bytes."""
    return base64.b64decode(value, validate=True).decode()


_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _geometric(value: Any) -> str:
    """A box, circle, line, lseg, path or polygon: its text with each coordinate as Python writes the float.

    Debezium renders them through the JDBC driver (``(1.0,1.0),(0.0,0.0)``, ``1.0E20``), Postgres itself
    (verify, a source copy) as ``(1,1),(0,0)``, ``1e+20``: the same numbers, written one way here.
    """
    text = _pg_text(value) if not isinstance(value, str) or not value.startswith(("(", "[", "<", "{")) else value
    return _NUMBER.sub(lambda number: repr(float(number.group())), text)


def bits_text(value: Any, width: int | None = None) -> str:
    """A bit string as Postgres writes it, ``0101``, padded to the column's ``bit(n)`` width.

    From Debezium: base64 of the bits' bytes, little-endian with leading zeros dropped, or a boolean for
    ``bit``/``BIT(1)``. From a driver: Postgres' text (kept), MariaDB's big-endian bytes, or a number (Spark's
    JDBC reader). A ``varbit`` has no width to pad to: ``B'0011'`` and ``B'11'`` both arrive as ``11``
    (docs/types.md).
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str) and width is not None and len(value) == width and set(value) <= {"0", "1"}:
        return value  # a driver's text (never base64 of that length: docs/types.md)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        number = int.from_bytes(base64.b64decode(value, validate=True), "little")
    else:
        number = int.from_bytes(bytes(value), "big")
    return format(number, f"0{width}b" if width else "b")


def _float(value: Any) -> float:
    # Debezium sends NaN and the infinities of float4/float8 as the strings "NaN", "Infinity", "-Infinity".
    return value if type(value) is float else float(value)


# Debezium JSON value -> canonical Python value, per type; types not listed pass unchanged.
CONVERTERS: dict[str, Any] = {
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
    "duration": _duration,
    "pg_text": _pg_text,
    "geometric": _geometric,
}
# What a malformed value raises: Decimal's InvalidOperation is an ArithmeticError, not a ValueError.
BAD_VALUE = (ValueError, TypeError, AttributeError, ArithmeticError)


def convert(value: Any, kind: str | None) -> Any:
    """Debezium JSON value -> canonical Python value for the column's type."""
    converter = CONVERTERS.get(kind or "")
    if value is None or converter is None:
        return value
    return converted(value, kind, converter)


def converted(value: Any, kind: str | None, converter: Any) -> Any:
    try:
        return converter(value)
    except BAD_VALUE as err:
        raise PoisonRecord(f"value {value!r} is not a valid {kind}: {err}") from None


def canonical_value(value: Any, kind: str | None, width: int | None = None) -> Any:
    """A value read from the source database -> the canonical form ``convert`` produces."""
    if value is None:
        return None
    if kind == "bits":  # Postgres' own text from the driver; MariaDB's bytes; a bit(1) may come as a bool
        return value if isinstance(value, str) else bits_text(value, width)
    if kind in ("date", "timestamp") and isinstance(value, str):  # far from now: Postgres' text (sync.catalog)
        try:
            return _date(value) if kind == "date" else _timestamp(value)
        except ValueError:  # no date at all (MariaDB's zero date '0000-00-00'): reported as differing, as it is
            return value
    if kind == "timestamp" and isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    if kind == "time" and not isinstance(value, time):
        # MariaDB returns TIME as a timedelta.
        seconds = value.total_seconds()
        return time(int(seconds // 3600), int(seconds % 3600 // 60), int(seconds % 60), value.microseconds)
    if kind == "time" and isinstance(value, time) and value.tzinfo:
        # A timetz: Debezium sends it moved to UTC (ZonedTime, "10:15:30Z"), as the stores hold it.
        return datetime.combine(date(2000, 1, 3), value).astimezone(UTC).time()
    if kind == "json" and isinstance(value, str):
        return json.loads(value)
    if kind == "bytes" and isinstance(value, memoryview | bytearray):
        return bytes(value)
    if kind == "bool":
        return bool(value)
    if kind == "uuid":
        return str(value)
    if kind == "decimal":
        return _decimal(value)
    if kind == "pg_text" and isinstance(value, bytes | memoryview):
        return bytes(value).decode()
    if kind == "geometric":
        return _geometric(value)
    if kind == "duration":
        return _duration(value)
    if kind == "interval" and isinstance(value, str):
        return _interval(value)
    if kind in ("point", "geometry"):
        return _spatial(value, point=kind == "point")
    return value


def _date_key(value: Any) -> str:
    return _iso(_date(value) if isinstance(value, str | int) else value)


def _time_key(value: Any) -> str:
    return str((_time(value) if isinstance(value, str) else canonical_value(value, "time")).isoformat())


def _timestamp_key(value: Any) -> str:
    return _iso(_timestamp(value) if isinstance(value, str | int) else canonical_value(value, "timestamp"))


def _bytes_key(value: Any) -> str:
    raw = base64.b64decode(value, validate=True) if isinstance(value, str) else bytes(value)
    return base64.b64encode(raw).decode()


def _decimal_key(value: Any) -> str:
    return format(value if isinstance(value, Decimal) else _decimal(value), "f")


# Key value (Debezium's JSON or a driver's) -> its id text, per type; str() for types not listed (int, text).
# Each is the text scalar_text gives for the canonical value: what the sinks store in the key's own field.
KEY_TEXT: dict[str, Any] = {
    "date": _date_key,
    "time": _time_key,
    "timestamp": _timestamp_key,
    "bytes": _bytes_key,
    "decimal": _decimal_key,
    "uuid": _uuid,
    "duration": _duration,
}
