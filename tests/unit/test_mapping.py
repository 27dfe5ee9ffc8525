"""Mapping: ids from primary keys, field selection, Debezium values to natural types."""

from __future__ import annotations

import base64
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import pytest

from cdcsync.events import Change, PoisonRecord
from cdcsync.sync.mapping import (
    TableMapping,
    canonical_doc,
    doc_id,
    fingerprint,
    map_row,
    scalar_text,
)
from cdcsync.sync.values import canonical_value, convert


def change(after: dict | None, op: str = "u") -> Change:
    return Change("src", "public.t", op, {"id": 7}, after, 1, 42, "src.public.t", 0, 5)


def test_doc_id_single_and_composite_keys_escape_the_separator() -> None:
    keyless = TableMapping("public.t", "t")  # no primary key in the catalog: the record key's own columns
    assert doc_id({"id": 7}, keyless) == "7"
    assert doc_id({"a": "x|y", "b": 2}, keyless) == "x\\|y|2"
    assert doc_id({"a": 1, "b": 2}, TableMapping("public.t", "t", ("b", "a"))) == "2|1"
    assert doc_id({"a": "x|", "b": "y"}, keyless) != doc_id({"a": "x", "b": "|y"}, keyless)


@pytest.mark.parametrize(
    "kind,debezium,source_value,expected",
    [
        ("decimal", "12345678901234.123456", Decimal("12345678901234.123456"), Decimal("12345678901234.123456")),
        ("date", "2024-02-29Z", date(2024, 2, 29), date(2024, 2, 29)),
        (
            "time",
            "13:45:30.123456Z",
            timedelta(hours=13, minutes=45, seconds=30, microseconds=123456),
            time(13, 45, 30, 123456),
        ),
        (
            "timestamp",
            "2024-02-29T11:45:30.123456Z",
            datetime(2024, 2, 29, 13, 45, 30, 123456, timezone(timedelta(hours=2))),
            datetime(2024, 2, 29, 11, 45, 30, 123456, UTC),
        ),
        (
            "timestamp",
            "2024-02-29T13:45:30Z",
            datetime(2024, 2, 29, 13, 45, 30),
            datetime(2024, 2, 29, 13, 45, 30, tzinfo=UTC),
        ),
        ("json", '{"a": [1, 2.5]}', '{"a": [1, 2.5]}', {"a": [1, 2.5]}),
        ("bytes", "AP8Q", b"\x00\xff\x10", b"\x00\xff\x10"),
        ("bool", 1, 1, True),
    ],
)
def test_debezium_and_source_values_meet_in_one_canonical_form(
    kind: str, debezium: object, source_value: object, expected: object
) -> None:
    assert convert(debezium, kind) == expected
    assert canonical_value(source_value, kind) == expected


def test_bad_value_for_its_type_is_poison() -> None:
    with pytest.raises(PoisonRecord, match="not a valid date"):
        convert("yesterday", "date")


def test_map_row_includes_renames_and_converts() -> None:
    mapping = TableMapping(
        "public.t",
        "things",
        include=("id", "total", "at"),
        rename={"total": "amount"},
        types={"total": "decimal", "at": "timestamp"},
    )
    row = map_row(change({"id": 7, "total": "1.50", "at": "2024-01-01T00:00:00Z", "secret": "x"}), mapping)
    assert (row.target, row.doc_id, row.version) == ("things", "7", 42)
    assert row.doc == {"id": 7, "amount": Decimal("1.50"), "at": datetime(2024, 1, 1, tzinfo=UTC)}
    assert map_row(change(None, op="d"), mapping).doc is None
    source = canonical_doc({"id": 7, "total": Decimal("1.5"), "at": datetime(2024, 1, 1), "secret": "x"}, mapping)
    assert fingerprint(source) == fingerprint(row.doc)


@pytest.mark.parametrize(("kind", "value"), [("decimal", "12,5"), ("decimal", "abc"), ("timestamp", "yesterday")])
def test_malformed_value_is_poison_not_a_crash(kind: str, value: str) -> None:
    mapping = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": kind})
    with pytest.raises(PoisonRecord, match=f"not a valid {kind}"):
        map_row(change({"id": 7, "v": value}), mapping)


@pytest.mark.parametrize("year", [1, 999, 1970, 2024, 9999])
@pytest.mark.parametrize("micro", [0, 1, 500000, 999999])
def test_utc_timestamp_text_is_isoformat(year: int, micro: int) -> None:
    value = datetime(year, 2, 28, 23, 59, 0, micro, tzinfo=UTC)
    assert scalar_text(value) == value.isoformat()


@pytest.mark.parametrize(
    "value",
    ["__debezium_unavailable_value", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", ["__debezium_unavailable_value"]],
    ids=["text", "bytea-base64", "array"],
)
def test_a_change_carrying_debeziums_placeholder_is_refused_naming_the_column_and_the_fix(value: object) -> None:
    """Written, the placeholder would overwrite the stored value (an unchanged TOAST value, identity not FULL)."""
    mapping = TableMapping("public.t", "t", ("id",), types={"id": "int", "big": "text", "n": "int"})
    with pytest.raises(PoisonRecord) as err:
        map_row(change({"id": 7, "big": value, "n": 2}), mapping)
    assert "['big']" in str(err.value) and "REPLICA IDENTITY" in str(err.value)
    assert map_row(change({"id": 7, "big": "x" * 5000, "n": 2}), mapping).doc == {"id": 7, "big": "x" * 5000, "n": 2}


def test_floats_keep_nan_and_the_infinities_debezium_sends_as_text() -> None:
    import math

    assert math.isnan(convert("NaN", "float"))
    assert (convert("Infinity", "float"), convert("-Infinity", "float")) == (math.inf, -math.inf)
    assert convert(1.5, "float") == 1.5 and math.copysign(1, convert(-0.0, "float")) == -1
    with pytest.raises(PoisonRecord):
        convert("not a number", "float")


def test_postgres_infinities_are_the_latest_and_earliest_values_every_store_holds() -> None:
    """As Debezium sends them (overflowed renderings) and as Postgres writes them (timestamptz, a source copy)."""
    latest, earliest = datetime.max.replace(tzinfo=UTC), datetime.min.replace(tzinfo=UTC)
    for text, expected in {
        "+294247-01-10T04:00:25.2Z": latest,  # timestamp 'infinity'
        "-290308-12-21T19:59:27.6Z": earliest,
        "infinity": latest,  # timestamptz
        "-infinity": earliest,
    }.items():
        assert convert(text, "timestamp") == expected, text
    assert convert("-5877611-06-21Z", "date") == date.max and convert("-5877611-06-22Z", "date") == date.min
    assert convert("infinity", "date") == date.max and convert("+292278994-08-16Z", "date") == date.max
    assert canonical_doc({"t": datetime.max}, TableMapping("public.t", "t", types={"t": "timestamp"})) == {"t": latest}
    assert doc_id({"k": "infinity"}, TableMapping("public.t", "t", ("k",), types={"k": "timestamp"})) == (
        "9999-12-31T23:59:59.999999+00:00"
    )
    # A real value past year 9999 is its text (sync.far_time), which the stores keep.
    assert convert("+10000-01-01T00:00:00Z", "timestamp") == "+10000-01-01T00:00:00+00:00"


def test_numeric_infinities_and_nan_as_debezium_sends_them() -> None:
    assert convert("POSITIVE_INFINITY", "decimal") == Decimal("Infinity")
    assert convert("NEGATIVE_INFINITY", "decimal") == Decimal("-Infinity")
    assert convert("NAN", "decimal").is_nan()
    assert scalar_text(convert("POSITIVE_INFINITY", "decimal")) == "Infinity"
    assert convert("18446744073709551615", "decimal") == Decimal(2**64 - 1)  # MariaDB BIGINT UNSIGNED, precise


def test_geometry_from_the_drivers_is_debeziums_struct() -> None:
    """Debezium's struct for POINT(1.5, 2), Postgres and MariaDB alike; verify makes it from each driver's value."""
    point = {"x": 1.5, "y": 2.0, "wkb": "AQEAAAAAAAAAAAD4PwAAAAAAAABA", "srid": None}
    assert canonical_value("(1.5,2)", "point") == point  # psycopg, and a Postgres source copy's text
    maria = bytes(4) + base64.b64decode(point["wkb"])  # MariaDB's storage form: SRID 0, then the WKB
    assert canonical_value(maria, "point") == point
    assert convert(point, "point") == point and convert("(1.5,2)", "point") == point
    # A GEOMETRY column holding a point: Debezium sends no x and y.
    assert canonical_value(maria, "geometry") == {"wkb": point["wkb"], "srid": None}
    line = "AQIAAAACAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAPA/AAAAAAAA8D8="  # LINESTRING(0 0, 1 1): no x, y
    srid = (4326).to_bytes(4, "little")
    assert canonical_value(srid + base64.b64decode(line), "geometry") == {"wkb": line, "srid": 4326}


@pytest.mark.parametrize(
    "postgres,debezium",
    [
        ("PT6S", "P0Y0M0DT0H0M6S"),
        ("PT1.5S", "P0Y0M0DT0H0M1.5S"),
        ("PT-4H-5M-6.25S", "P0Y0M0DT-4H-5M-6.25S"),
        ("P1M-2D", "P0Y1M-2DT0H0M0S"),
        ("PT0S", "P0Y0M0DT0H0M0S"),
        ("P100Y", "P100Y0M0DT0H0M0S"),
        ("P1DT0.000001S", "P0Y0M1DT0H0M0.000001S"),
        ("P-1Y-2M3DT-1S", "P-1Y-2M3DT0H0M-1S"),
        ("P14D", "P0Y0M14DT0H0M0S"),
    ],
)
def test_an_interval_is_debeziums_text_whichever_path_read_it(postgres: str, debezium: str) -> None:
    """Pairs seen on this stack: Postgres' IntervalStyle iso_8601 (verify, a source copy) and Debezium's string."""
    assert convert(debezium, "interval") == debezium
    assert convert(postgres, "interval") == debezium
    assert canonical_value(postgres, "interval") == debezium


@pytest.mark.parametrize(
    "micros,driver,text",
    [
        (0, timedelta(0), "00:00:00"),
        (49_530_123_456, timedelta(hours=13, minutes=45, seconds=30, microseconds=123456), "13:45:30.123456"),
        (3_020_399_999_999, timedelta(hours=838, minutes=59, seconds=59, microseconds=999999), "838:59:59.999999"),
        (-3_020_399_999_999, -timedelta(hours=838, minutes=59, seconds=59, microseconds=999999), "-838:59:59.999999"),
        (-3_600_000_000, timedelta(hours=-1), "-01:00:00"),
        (-500_000, timedelta(microseconds=-500_000), "-00:00:00.500000"),
        (90_000_000_000, timedelta(hours=25), "25:00:00"),
    ],
)
def test_a_mariadb_time_is_its_own_text_past_a_day_and_below_zero(micros: int, driver: timedelta, text: str) -> None:
    """Debezium's microseconds, the driver's timedelta and a JDBC read's text meet in the text MariaDB shows."""
    assert convert(micros, "duration") == text
    assert canonical_value(driver, "duration") == text
    assert convert(text, "duration") == text
    assert doc_id({"t": micros}, TableMapping("db.t", "t", ("t",), types={"t": "duration"})) == text
    assert doc_id({"t": driver}, TableMapping("db.t", "t", ("t",), types={"t": "duration"})) == text


def test_a_time_of_day_reads_as_the_same_duration_text_whichever_form_it_came_in() -> None:
    """An older connector config sent MariaDB's TIME as ISO text: its records in a compacted topic still read."""
    assert convert("13:45:30.123456Z", "duration") == convert(49_530_123_456, "duration")
    assert convert("07:00:00Z", "duration") == "07:00:00" == canonical_value(time(7), "duration")
    with pytest.raises(PoisonRecord):
        convert("7 o'clock", "duration")


def test_mariadb_dates_and_datetimes_as_counts_by_the_columns_precision() -> None:
    """DATE: days; DATETIME(0-3): milliseconds; DATETIME(4-6): microseconds (adaptive_time_microseconds)."""
    assert convert(19782, "date") == date(2024, 2, 29) == convert("2024-02-29Z", "date")
    assert convert(-719162, "date") == date(1, 1, 1)
    assert convert(2932896, "date") == date(9999, 12, 31)
    at = datetime(2024, 2, 29, 11, 45, 30, 123000, UTC)
    micros, millis = 1_709_207_130_123_000, 1_709_207_130_123
    assert convert(micros, "timestamp") == at
    mapping = TableMapping("db.t", "t", ("at",), types={"at": "timestamp", "n": "int"}, millis=frozenset({"at"}))
    by_id = TableMapping("db.t", "t", ("id",), types={"at": "timestamp", "n": "int"}, millis=frozenset({"at"}))
    assert map_row(change({"at": millis, "n": 1}), by_id).doc == {"at": at, "n": 1}
    assert doc_id({"at": millis}, mapping) == at.isoformat() == doc_id({"at": "2024-02-29T11:45:30.123Z"}, mapping)
    assert doc_id({"at": at.replace(tzinfo=None)}, mapping) == at.isoformat()  # the driver's naive datetime
    latest = datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)
    assert convert(253_402_300_799_999_999, "timestamp") == latest


def test_money_geometric_and_other_postgres_text_meet_in_one_form_whichever_path_read_them() -> None:
    """Debezium: money's digits, the base64 of a value's text; the driver (lc_monetary C): $1,234.56, the text."""
    assert convert("-92233720368547758.08", "decimal") == Decimal("-92233720368547758.08")
    assert canonical_value("-$92,233,720,368,547,758.08", "decimal") == Decimal("-92233720368547758.08")
    assert canonical_value("$0.50", "decimal") == Decimal("0.50")
    box = base64.b64encode(b"(1.0,1.0),(0.0,0.0)").decode()
    assert convert(box, "geometric") == canonical_value("(1,1),(0,0)", "geometric") == "(1.0,1.0),(0.0,0.0)"
    big = base64.b64encode(b"<(1.0E20,-0.5),2.5>").decode()
    assert convert(big, "geometric") == canonical_value("<(1e+20,-0.5),2.5>", "geometric") == "<(1e+20,-0.5),2.5>"
    pair = base64.b64encode(b'(1,"x ""y""")').decode()
    assert convert(pair, "pg_text") == canonical_value('(1,"x ""y""")', "pg_text") == '(1,"x ""y""")'
    with pytest.raises(PoisonRecord):
        convert("not base64!", "pg_text")


def test_bit_strings_as_postgres_writes_them_from_debeziums_bytes_and_each_driver() -> None:
    from cdcsync.sync.values import bits_text

    assert bits_text("", 3) == "000"  # B'000': Debezium drops the leading zeros, here every bit
    assert bits_text("AQg=", 12) == "100000000001"  # little-endian bytes
    assert bits_text("Aw==", 12) == "000000000011"
    assert bits_text(True, 1) == "1" and bits_text(False, None) == "0"  # bit, BIT(1)
    assert bits_text(b"\x08\x01", 12) == "100000000001"  # MariaDB's driver: big-endian
    assert bits_text(2049, 12) == "100000000001"
    assert bits_text("000000000011", 12) == "000000000011"  # Postgres' driver
    assert bits_text("AQI=", None) == "1000000001"  # varbit: no width, no leading zeros to restore
    mapping = TableMapping("public.t", "t", ("k",), types={"k": "bits", "b": "bits"}, widths={"k": 4, "b": 3})
    row = map_row(Change("s", "public.t", "c", {"k": "AQ=="}, {"k": "AQ==", "b": ""}, None, 1, "t", 0, 1), mapping)
    assert (row.doc_id, row.doc) == ("0001", {"k": "0001", "b": "000"})
    assert doc_id({"k": "0001"}, mapping) == "0001"  # verify's key, from the driver


def test_fingerprint_bytes_tell_documents_apart_exactly_as_fingerprint_does() -> None:
    from datetime import UTC, date, datetime, time, timedelta, timezone
    from decimal import Decimal

    from cdcsync.sync.mapping import fingerprint, fingerprint_bytes

    values = [
        1, 1.0, 2**70, -(2**63), "1", "null", True, Decimal("1.50"), Decimal("1.5"), float("nan"), float("inf"),
        float("-inf"), datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
        date(2026, 1, 1), time(13, 45, 30), b"\x00\x01", [1, None, 2.5], {"b": 1, "a": [float("nan")]}, [],
    ]  # fmt: skip
    docs = [{"v": v, "id": 7} for v in values] + [{"id": 7}, {"id": 7, "w": "x"}]
    for a in docs:
        for b in docs:
            assert (fingerprint(a) == fingerprint(b)) == (fingerprint_bytes(a) == fingerprint_bytes(b)), (a, b)


def test_a_time_with_its_zone_is_compared_in_utc_as_debezium_sends_it() -> None:
    from datetime import time, timedelta, timezone

    from cdcsync.sync.values import canonical_value

    plus2, minus3 = timezone(timedelta(hours=2)), timezone(timedelta(hours=-3))
    assert canonical_value(time(13, 45, 30, 123456, tzinfo=plus2), "time") == time(11, 45, 30, 123456)
    assert canonical_value(time(0, 30, tzinfo=plus2), "time") == time(22, 30)  # wraps past midnight
    assert canonical_value(time(23, 30, tzinfo=minus3), "time") == time(2, 30)
    assert canonical_value(time(13, 45), "time") == time(13, 45)  # a time of day stays as it is


def test_a_numeric_array_from_the_source_has_a_stored_form_in_the_warehouse() -> None:
    from decimal import Decimal

    from cdcsync.sync.sinks.delta_values import stored

    # The digits as Debezium sends a numeric[]'s elements (decimal.handling.mode=string): 1.50 stays 1.50.
    assert stored([Decimal("1.50"), None, Decimal("-2")]) == '["1.50", null, "-2"]'
