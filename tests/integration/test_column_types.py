"""Every common column type reaches its topic with its value intact.

Debezium's JSON (schemas off, see connectors/templates) is decoded the way a
follower will decode it: decimals are exact strings, temporal values ISO
strings in UTC (MariaDB's dates, times and datetimes as counts of days and
microseconds), JSON columns JSON text, binary base64. "Intact" means that
decoding gives back exactly the value written, including a zone shift.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from tests.support import ENV, captured, execute, read_topic, uid

UTC = UTC
PLUS2 = timezone(timedelta(hours=2))


def iso_date(v: str) -> date:
    return date.fromisoformat(v.removesuffix("Z"))


def iso_time(v: str) -> time:
    return time.fromisoformat(v.removesuffix("Z"))


def iso_ts(v: str) -> datetime:
    return datetime.fromisoformat(v)


# MariaDB's connector counts (time.precision.mode=adaptive_time_microseconds: a TIME may pass 24 h).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def days(v: int) -> date:
    return EPOCH.date() + timedelta(days=v)


def micros_of_day(v: int) -> time:
    return (datetime.min + timedelta(microseconds=v)).time()


def micros(v: int) -> datetime:
    return EPOCH + timedelta(microseconds=v)


same: Callable[[Any], Any] = lambda v: v  # noqa: E731

# column -> (SQL type, SQL literal, expected Python value, decoder of the topic's value)
COMMON: dict[str, tuple[str, str, Any, Callable[[Any], Any]]] = {
    "c_small": ("smallint", "-32768", -32768, same),
    "c_int": ("integer", "2147483647", 2147483647, same),
    "c_big": ("bigint", "-9223372036854775808", -9223372036854775808, same),
    "c_num": ("numeric(20,6)", "12345678901234.123456", Decimal("12345678901234.123456"), Decimal),
    "c_double": ("double precision", "2.25", 2.25, same),
    "c_text": ("text", "'héllo ✓ \"quoted\"'", 'héllo ✓ "quoted"', same),
    "c_varchar": ("varchar(20)", "'v'", "v", same),
    "c_date": ("date", "'2024-02-29'", date(2024, 2, 29), iso_date),
    "c_time": ("time(6)", "'13:45:30.123456'", time(13, 45, 30, 123456), iso_time),
    "c_null": ("integer", "NULL", None, same),
}
POSTGRES = {
    **COMMON,
    "c_bool": ("boolean", "true", True, same),
    "c_ts": ("timestamp(6)", "'2024-02-29 13:45:30.123456'", datetime(2024, 2, 29, 13, 45, 30, 123456, UTC), iso_ts),
    "c_tstz": (
        "timestamptz(6)",
        "'2024-02-29 13:45:30.123456+02'",
        datetime(2024, 2, 29, 13, 45, 30, 123456, PLUS2),
        iso_ts,
    ),
    "c_json": ("json", "'{\"a\": [1, 2.5]}'", {"a": [1, 2.5]}, json.loads),
    "c_jsonb": ("jsonb", '\'{"b": {"c": null}}\'', {"b": {"c": None}}, json.loads),
    "c_uuid": (
        "uuid",
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        uuid.UUID,
    ),
    "c_bytes": ("bytea", "'\\x00ff10'::bytea", b"\x00\xff\x10", base64.b64decode),
    "c_enum": ("mood_{u}", "'happy'", "happy", same),
    "c_int_arr": ("int[]", "'{1,2,3}'", [1, 2, 3], same),
    "c_text_arr": ("text[]", '\'{"x","y z"}\'', ["x", "y z"], same),
}
MARIADB = {
    **COMMON,
    "c_date": ("date", "'2024-02-29'", date(2024, 2, 29), days),
    "c_time": ("time(6)", "'13:45:30.123456'", time(13, 45, 30, 123456), micros_of_day),
    "c_tiny": ("tinyint", "-128", -128, same),
    "c_medium": ("mediumint", "8388607", 8388607, same),
    "c_bool": ("boolean", "true", 1, same),  # MariaDB's BOOLEAN is TINYINT(1): it stores 1
    "c_datetime": (
        "datetime(6)",
        "'2024-02-29 13:45:30.123456'",
        datetime(2024, 2, 29, 13, 45, 30, 123456, UTC),
        micros,
    ),
    # Written in a +02:00 session: TIMESTAMP is zone-aware, so the topic has 11:45 UTC.
    "c_ts": (
        "timestamp(6) NULL",
        "'2024-02-29 13:45:30.123456'",
        datetime(2024, 2, 29, 13, 45, 30, 123456, PLUS2),
        iso_ts,
    ),
    "c_json": ("json", "'{\"a\": [1, 2.5]}'", {"a": [1, 2.5]}, json.loads),
    "c_uuid": (
        "uuid",
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        uuid.UUID,
    ),
    "c_bytes": ("blob", "x'00ff10'", b"\x00\xff\x10", base64.b64decode),
    "c_enum": ("enum('sad','ok','happy')", "'happy'", "happy", same),
}


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_every_common_type_arrives_intact(kind: str) -> None:
    columns = POSTGRES if kind == "postgres" else MARIADB
    u = uid()
    table = f"types_{u}"
    ddl = [
        f"CREATE TABLE {table} (id int PRIMARY KEY, "
        + ", ".join(f"{name} {sqltype.format(u=u)}" for name, (sqltype, *_) in columns.items())
        + ")"
    ]
    if kind == "postgres":
        ddl.insert(0, f"CREATE TYPE mood_{u} AS ENUM ('sad', 'ok', 'happy')")
    namespace = "public" if kind == "postgres" else ENV["MARIADB_DATABASE"]
    insert = f"INSERT INTO {table} VALUES (1, " + ", ".join(lit for _, lit, _, _ in columns.values()) + ")"
    try:
        with captured(kind, ddl, [f"{namespace}.{table}"]) as cfg:
            if kind == "mariadb":
                execute(kind, "SET time_zone = '+02:00'", insert)
            else:
                execute(kind, insert)
            record = read_topic(cfg.sources[0].topic(cfg.sources[0].tables[0]), lambda rs: len(rs) >= 1)[0]
            after = record.value["after"]
            decoded = {
                name: (None if after[name] is None else decode(after[name]))
                for name, (_, _, _, decode) in columns.items()
            }
            expected = {name: value for name, (_, _, value, _) in columns.items()}
            assert decoded == expected
    finally:
        if kind == "postgres":
            execute(kind, f"DROP TYPE IF EXISTS mood_{u}")
