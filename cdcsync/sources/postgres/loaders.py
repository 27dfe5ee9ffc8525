"""A Postgres connection that reads values as ``verify`` compares them: psycopg's loaders, wrapped.

psycopg refuses some values Postgres holds ('infinity', dates past year
9999 or BC, ``time '24:00:00'``) and makes Python objects of others that
would compare with neither Debezium's form nor each other. ``reading``
registers a loader per such type, each wrapping psycopg's own (its C one,
where the binary package is installed). A Postgres source's rows are read
through it (``PostgresReads``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any

import psycopg
from psycopg import postgres
from psycopg.abc import AdaptContext
from psycopg.abc import Loader as LoaderType
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types.string import TextLoader

from cdcsync.sources.base import SourceSettings
from cdcsync.sources.postgres.connection import connect

# The bounds a far value is read as (the same as sync.values reads Debezium's far values as).
LATEST = datetime.max.replace(tzinfo=UTC)
EARLIEST = datetime.min.replace(tzinfo=UTC)

FAR_FIRST = frozenset(b"i-")  # the first byte of a far date or timestamp psycopg refuses, as Postgres writes it


@contextmanager
def reading(source: SourceSettings) -> Iterator[psycopg.Connection]:
    """A connection that reads values as ``verify`` compares them."""
    with connect(source) as conn:
        for name, loader in _LOADERS.items():
            conn.adapters.register_loader(name, loader)
        conn.execute("SET IntervalStyle = 'iso_8601'")
        conn.execute("SET lc_monetary = 'C'")  # money as $1,234.56, which sync.values reads as its digits
        yield conn


def _wrapped_loader(name: str, load: Callable[[LoaderType, Any], Any]) -> type[Loader]:
    """A loader of ``name`` whose ``load(base, data)`` gets psycopg's own loader of the type to do the work (its
    C one, with psycopg's binary package: a verify spent a tenth of its time parsing timestamps in the
    pure-Python one a loader once derived from, which C types cannot be)."""
    found = postgres.adapters.get_loader(postgres.types[name].oid, Format.TEXT)
    if found is None:
        raise RuntimeError(f"psycopg has no loader of {name}")
    base: type[LoaderType] = found

    class Wrapped(Loader):
        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data: Any) -> Any:
            return load(self._base, data)

    return Wrapped


def _far_loader(name: str, latest: Any, earliest: Any) -> type[Loader]:
    """psycopg's loader of ``name``, but 'infinity' read as the stores hold it (sync.mapping), and a value Python
    cannot hold read as its text.

    psycopg refuses both (``DataError``: "timestamp too large (after year 10K)", BC dates), which ended a
    ``verify`` in a traceback; as text, such a row is reported like any other that differs.
    """

    def load(base: LoaderType, data: Any) -> Any:
        if data[0] in FAR_FIRST:  # 'infinity', '-infinity': a date or timestamp starts with a digit
            text = bytes(data)
            if text == b"infinity":
                return latest
            if text == b"-infinity":
                return earliest
        try:
            return base.load(data)
        except psycopg.DataError:
            return bytes(data).decode()

    return _wrapped_loader(name, load)


def _day_end_loader(name: str) -> type[Loader]:
    """psycopg's loader of ``name`` (time, timetz), but ``24:00:00``, which Postgres takes and Python's ``time``
    cannot hold, read as ``00:00:00``: what Debezium sends for it (docs/types.md, "Known gaps")."""

    def load(base: LoaderType, data: Any) -> Any:
        return base.load(b"00" + bytes(data[2:]) if bytes(data[:2]) == b"24" else data)

    return _wrapped_loader(name, load)


_LOADERS: dict[str, type[Loader]] = {
    # JSON as its text, as MariaDB's driver returns it: decoded here, a JSON string value could not be told
    # from JSON text by canonical_value.
    "json": TextLoader,
    "jsonb": TextLoader,
    # Types Debezium sends as Postgres' own text; psycopg would make Python objects of them (ipaddress, Range,
    # timedelta) that neither compare with it nor fingerprint. interval is read in IntervalStyle iso_8601.
    **dict.fromkeys(
        ("inet", "cidr", "macaddr", "macaddr8", "int4range", "int8range", "numrange", "tsrange", "tstzrange"),
        TextLoader,
    ),
    **dict.fromkeys(("daterange", "interval", "xml"), TextLoader),
    "timestamp": _far_loader("timestamp", LATEST.replace(tzinfo=None), EARLIEST.replace(tzinfo=None)),
    "timestamptz": _far_loader("timestamptz", LATEST, EARLIEST),
    "date": _far_loader("date", date.max, date.min),
    "time": _day_end_loader("time"),
    "timetz": _day_end_loader("timetz"),
}
