"""One document id per row, whatever read its key: Debezium's key JSON or a database driver.

Streaming and ``bootstrap --from topics`` see the key as Debezium writes it
(connectors/templates: ``time.precision.mode=isostring``,
``binary.handling.mode=base64``, ``decimal.handling.mode=string``);
``bootstrap --from source`` sees Spark JDBC values (dates as ``date``, bytes
as ``bytes``, the TEXT_KINDS as text), ``verify`` psycopg's and pymysql's.
"""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcsync.events import PoisonRecord, Record
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import Row, TableMapping, doc_id
from cdcsync.sync.sink import WriteResult

PLUS2 = timezone(timedelta(hours=2))
FIXTURES = Path(__file__).parent / "fixtures"


def mapping(types: dict[str, str], key: tuple[str, ...] = ("k",)) -> TableMapping:
    return TableMapping("public.t", "t", key_columns=key, types=types)


# kind, Debezium's key value, what drivers return for the same value, the id
SAME_KEY = [
    ("date", "2024-02-29Z", [date(2024, 2, 29)], "2024-02-29"),
    ("date", "0001-01-01Z", [date(1, 1, 1)], "0001-01-01"),
    (
        "timestamp",
        "2024-02-29T11:45:30.123456Z",
        [
            datetime(2024, 2, 29, 11, 45, 30, 123456),  # psycopg timestamp, pymysql DATETIME
            datetime(2024, 2, 29, 13, 45, 30, 123456, PLUS2),  # psycopg timestamptz in a +02 session
            "2024-02-29 11:45:30.123456",  # JDBC text of a timestamp
            "2024-02-29 13:45:30.123456+02",  # JDBC text of a timestamptz
        ],
        "2024-02-29T11:45:30.123456+00:00",
    ),
    (
        "timestamp",
        "2024-02-29T13:45:30Z",
        [datetime(2024, 2, 29, 13, 45, 30), "2024-02-29 13:45:30"],
        "2024-02-29T13:45:30+00:00",
    ),  # fmt: skip
    (
        "timestamp",
        "2000-01-01T00:00:00.5Z",
        [datetime(2000, 1, 1, 0, 0, 0, 500000), "2000-01-01 00:00:00.5"],
        "2000-01-01T00:00:00.500000+00:00",
    ),  # fmt: skip
    (
        "timestamp",
        "2024-03-01T04:30:00.000000Z",  # a Postgres timestamptz: always six digits
        [datetime(2024, 2, 29, 23, 30, tzinfo=timezone(timedelta(hours=-5))), "2024-02-29 23:30:00-05"],
        "2024-03-01T04:30:00+00:00",
    ),
    (
        "time",
        "13:45:30.123456Z",
        [time(13, 45, 30, 123456), timedelta(hours=13, minutes=45, seconds=30, microseconds=123456), "13:45:30.123456"],
        "13:45:30.123456",
    ),
    ("time", "23:59:59.5Z", [timedelta(hours=23, minutes=59, seconds=59.5), "23:59:59.5"], "23:59:59.500000"),
    ("time", "00:00:00Z", [time(0), timedelta(0), "00:00:00"], "00:00:00"),
    ("bytes", "AP8Q", [b"\x00\xff\x10", bytearray(b"\x00\xff\x10"), memoryview(b"\x00\xff\x10")], "AP8Q"),
    ("bytes", "fA==", [b"|"], "fA=="),
    (
        "uuid",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"],
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ),
    ("decimal", "12.50", [Decimal("12.50"), "12.50"], "12.50"),
    ("decimal", "-0.01", [Decimal("-0.01")], "-0.01"),
    ("decimal", "100.00", [Decimal("1.0000E+2")], "100.00"),
]


@pytest.mark.parametrize(("kind", "debezium", "driver_values", "expected"), SAME_KEY)
def test_a_key_streamed_and_read_from_the_source_gives_one_id(
    kind: str, debezium: Any, driver_values: list[Any], expected: str
) -> None:
    m = mapping({"k": kind, "v": "int"})
    assert doc_id({"k": debezium}, m) == expected
    for value in driver_values:
        assert doc_id({"k": value}, m) == expected, value


def test_integer_and_text_ids_are_what_they_always_were() -> None:
    """Stores built before keep their ids: str() of the value, composite parts escaped and joined by '|'."""
    assert doc_id({"id": 7}, mapping({"id": "int"}, ("id",))) == "7"
    assert doc_id({"id": -9223372036854775808}, mapping({"id": "int"}, ("id",))) == "-9223372036854775808"
    assert doc_id({"k": "x|y\\"}, mapping({"k": "text"})) == "x|y\\"  # one column: never escaped
    assert doc_id({"k": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}, mapping({"k": "text"})) == (
        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"  # a CHAR(36) uuid is text: kept as written
    )
    composite = mapping({"a": "text", "b": "int"}, ("b", "a"))
    assert doc_id({"a": "x|y", "b": 2}, composite) == "2|x\\|y"
    assert doc_id({"a": "x|", "b": 1}, mapping({"a": "text", "b": "text"}, ("a", "b"))) != doc_id(
        {"a": "x", "b": "|1"}, mapping({"a": "text", "b": "text"}, ("a", "b"))
    )


def test_a_composite_key_is_canonical_in_each_part() -> None:
    m = mapping({"a": "text", "k": "date", "v": "int"}, ("a", "k"))
    streamed = doc_id({"a": "x|y", "k": "2024-02-29Z"}, m)
    assert streamed == doc_id({"a": "x|y", "k": date(2024, 2, 29)}, m) == "x\\|y|2024-02-29"


def test_a_table_without_primary_key_uses_the_key_it_has_typed_by_the_catalog() -> None:
    m = TableMapping("public.t", "t", types={"d": "date", "n": "int"})
    assert doc_id({"d": "2024-02-29Z", "n": 1}, m) == doc_id({"d": date(2024, 2, 29), "n": 1}, m) == "2024-02-29|1"


def test_a_key_lacking_a_catalog_key_column_is_poison_that_says_how_to_repair() -> None:
    m = mapping({"id": "int", "code": "text"}, ("id",))
    with pytest.raises(PoisonRecord) as caught:
        doc_id({"code": "A-1"}, m)
    reason = str(caught.value)
    assert "public.t" in reason and "'id'" in reason and "['code']" in reason
    assert "primary key changed" in reason and "cdcsync reindex" in reason and "--table public.t" in reason


@pytest.mark.parametrize(("kind", "value"), [("date", "yesterday"), ("bytes", "not base64!"), ("uuid", "nope")])
def test_a_key_value_invalid_for_its_type_is_poison(kind: str, value: str) -> None:
    with pytest.raises(PoisonRecord, match=f"public.t: key k='.*' is not a valid {kind}"):
        doc_id({"k": value}, mapping({"k": kind}))


class Kept:
    """A sink that keeps what it is given; every row applies."""

    name, chunk_rows, writers = "kept", None, 1

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def write(self, _batch_id: int, rows: list[Row]) -> WriteResult:
        self.rows += rows
        return WriteResult(applied=len(rows))


class Letters:
    def __init__(self) -> None:
        self.sent: list[tuple[Record, str, str]] = []

    def send(self, record: Record, stage: str, reason: str) -> None:
        self.sent.append((record, stage, reason))

    def flush(self) -> None:
        pass


def test_a_record_keyed_by_other_columns_is_dead_lettered_and_the_batch_goes_on() -> None:
    """The primary key changed (or message.key.columns): one dead letter, the counts add up, nothing raised."""
    recorded = [json.loads(line) for line in (FIXTURES / "postgres.jsonl").read_text().splitlines()]
    live = [r for r in recorded if r["value"] is not None][:3]
    live[1]["key"] = json.dumps({"code": "A-1"})  # the key the connector sends once the PK is `code`
    records = [Record(r["topic"], r["partition"], r["offset"], r["key"].encode(), r["value"].encode()) for r in live]
    sink, letters = Kept(), Letters()
    m = TableMapping("public.t", "t", key_columns=("id",), types={"id": "int", "v": "int"})
    follower = Follower("search", sink, {live[0]["topic"]: m}, letters, report=False)  # type: ignore[arg-type]
    counts = follower.process(0, records)
    assert (counts.records, counts.applied, counts.dead_lettered) == (3, 2, 1) and counts.adds_up()
    assert len(sink.rows) == 2
    ((record, stage, reason),) = letters.sent
    assert record.offset == live[1]["offset"] and stage == "parse"
    assert "primary key changed" in reason and "cdcsync reindex" in reason
