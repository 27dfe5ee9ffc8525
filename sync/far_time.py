"""Dates and timestamps no Python ``date`` holds (before year 1, after 9999): exact, as ISO text.

Postgres' dates run from 4713 BC to 5874897 AD and its timestamps to 294276 AD.
Debezium sends such a value in ISO 8601's expanded form, astronomical years (year
0 is 1 BC): ``-4712-01-01T00:00:00Z``, ``+10000-01-01Z``; Postgres writes
``4713-01-01 00:00:00 BC``. Its canonical value is the text a ``datetime``'s
``isoformat`` would be with that year: ``-0043-03-15``,
``+10000-01-01T00:00:00+00:00`` (UTC). Elasticsearch and Redis keep that text;
the Delta tables' DATE and TIMESTAMP columns, which count days and microseconds
since 1970, hold the value itself (``days_of``, ``micros_of``, back with
``date_of_days``, ``timestamp_of_micros``). Any value Python does hold comes back
as a ``date`` or an aware ``datetime``, as everywhere else.

The Gregorian calendar repeats every 400 years, so a far date is moved by whole
400-year cycles into the range Python knows and moved back.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

CYCLE_DAYS = 146_097  # days in 400 Gregorian years
DAY_MICROS = 86_400_000_000
ANCHOR = date(2000, 1, 1)  # the cycles are counted from here
EPOCH_DAY = date(1970, 1, 1)
ANCHOR_DAYS = (ANCHOR - EPOCH_DAY).days
FIRST_DAYS = (date.min - EPOCH_DAY).days  # the days Python's date holds, from 1970
LAST_DAYS = (date.max - EPOCH_DAY).days
_FAR = re.compile(
    r"([+-]?)(\d{4,})-(\d\d)-(\d\d)"  # year (expanded: signed, astronomical), month, day
    r"(?:[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?"  # time of day
    r"(Z|[+-]\d\d(?::?\d\d){0,2})?"  # zone offset (Postgres writes a local mean time's seconds: +00:53:28)
    r"( BC)?"  # Postgres' era (its years are not astronomical)
)


def _days(year: int, month: int, day: int) -> int:
    cycles = (year - ANCHOR.year) // 400
    return (date(year - 400 * cycles, month, day) - EPOCH_DAY).days + cycles * CYCLE_DAYS


def _civil(days: int) -> tuple[int, int, int]:
    cycles, rest = divmod(days - ANCHOR_DAYS, CYCLE_DAYS)
    moved = ANCHOR + timedelta(days=rest)
    return moved.year + 400 * cycles, moved.month, moved.day


def _year(year: int) -> str:
    if year > 9999:
        return f"+{year}"
    return f"{year:04d}" if year >= 0 else f"-{-year:04d}"


def _parse(text: str) -> tuple[int, int] | None:
    """ISO or Postgres text -> (days since 1970, microseconds into that day) in UTC; None if not such text."""
    found = _FAR.fullmatch(text)
    if found is None:
        return None
    sign, year, month, day, hour, minute, second, fraction, offset, era = found.groups()
    astronomical = -int(year) if sign == "-" else int(year)
    if era:
        astronomical = 1 - astronomical
    micros = ((int(hour or 0) * 60 + int(minute or 0)) * 60 + int(second or 0)) * 1_000_000
    micros += int((fraction or "0").ljust(9, "0")[:6])
    if offset and offset != "Z":
        digits = offset[1:].replace(":", "").ljust(6, "0")
        shift = ((int(digits[:2]) * 60 + int(digits[2:4])) * 60 + int(digits[4:])) * 1_000_000
        micros -= shift if offset[0] == "+" else -shift
    extra_days, micros = divmod(micros, DAY_MICROS)
    return _days(astronomical, int(month), int(day)) + extra_days, micros


def far_date(text: str) -> date | str:
    """A date's ISO or Postgres text, any year -> its canonical value; ValueError if it is not one."""
    parsed = _parse(text)
    if parsed is None:
        raise ValueError(f"not a date: {text!r}")
    return date_of_days(parsed[0])


def far_timestamp(text: str) -> datetime | str:
    """A timestamp's ISO or Postgres text, any year, zone offset or none (UTC) -> its canonical value."""
    parsed = _parse(text)
    if parsed is None:
        raise ValueError(f"not a timestamp: {text!r}")
    return timestamp_of_micros(parsed[0] * DAY_MICROS + parsed[1])


def date_of_days(days: int) -> date | str:
    if FIRST_DAYS <= days <= LAST_DAYS:
        return EPOCH_DAY + timedelta(days=days)
    year, month, day = _civil(days)
    return f"{_year(year)}-{month:02d}-{day:02d}"


def timestamp_of_micros(micros: int) -> datetime | str:
    days, of_day = divmod(micros, DAY_MICROS)
    if FIRST_DAYS <= days <= LAST_DAYS:
        return datetime.combine(EPOCH_DAY + timedelta(days=days), datetime.min.time(), UTC) + timedelta(
            microseconds=of_day
        )
    year, month, day = _civil(days)
    seconds, fraction = divmod(of_day, 1_000_000)
    minutes, second = divmod(seconds, 60)
    clock = f"{minutes // 60:02d}:{minutes % 60:02d}:{second:02d}" + (f".{fraction:06d}" if fraction else "")
    return f"{_year(year)}-{month:02d}-{day:02d}T{clock}+00:00"


def days_of(value: date | str) -> int:
    """A canonical date -> days since 1970."""
    if isinstance(value, str):
        parsed = _parse(value)
        if parsed is None:
            raise ValueError(f"not a date: {value!r}")
        return parsed[0]
    return (value - EPOCH_DAY).days


def micros_of(value: datetime | str) -> int:
    """A canonical timestamp -> microseconds since 1970 in UTC."""
    if isinstance(value, str):
        parsed = _parse(value)
        if parsed is None:
            raise ValueError(f"not a timestamp: {value!r}")
        return parsed[0] * DAY_MICROS + parsed[1]
    moment = (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    return (moment.date() - EPOCH_DAY).days * DAY_MICROS + _of_day(moment)


def _of_day(moment: datetime) -> int:
    return ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond
