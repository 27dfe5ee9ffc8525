"""Dates and timestamps before year 1 and after 9999: exact text, and days or microseconds for the warehouse."""

from datetime import UTC, date, datetime

import pytest

from cdcsync.sync.far_time import date_of_days, days_of, far_date, far_timestamp, micros_of, timestamp_of_micros
from cdcsync.sync.values import KEY_TEXT, canonical_value, convert


@pytest.mark.parametrize(
    ("sent", "canonical"),
    [
        ("-0043-03-15Z", "-0043-03-15"),  # Debezium, streamed: 44 BC (year 0 is 1 BC)
        ("0044-03-15 BC", "-0043-03-15"),  # Postgres' text
        ("0001-01-01 BC", "0000-01-01"),
        ("4713-01-01 BC", "-4712-01-01"),  # Postgres' first date
        ("+10000-01-01Z", "+10000-01-01"),
        ("10000-02-29", "+10000-02-29"),  # a leap year
        ("5874897-12-31", "+5874897-12-31"),  # Postgres' last date
        ("9999-12-31", date(9999, 12, 31)),
        ("0001-01-01", date(1, 1, 1)),
    ],
)
def test_a_far_date_is_its_iso_text_and_a_near_one_a_date(sent: str, canonical: object) -> None:
    assert convert(sent, "date") == canonical
    assert date_of_days(days_of(canonical)) == canonical  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sent", "canonical"),
    [
        ("-4712-01-01T00:00:00Z", "-4712-01-01T00:00:00+00:00"),
        ("-4712-01-01T00:00:00.000000Z", "-4712-01-01T00:00:00+00:00"),
        ("0000-01-01T00:00:00.5Z", "0000-01-01T00:00:00.500000+00:00"),
        ("+294276-12-31T23:59:59.999999Z", "+294276-12-31T23:59:59.999999+00:00"),
        ("+12345-06-07T08:09:10.123Z", "+12345-06-07T08:09:10.123000+00:00"),
        ("4713-01-01 00:00:00 BC", "-4712-01-01T00:00:00+00:00"),  # Postgres' timestamp
        ("4713-01-01 00:53:28+00:53:28 BC", "-4712-01-01T00:00:00+00:00"),  # timestamptz in a local mean time
        ("10000-01-01 01:00:00+02", datetime(9999, 12, 31, 23, tzinfo=UTC)),  # far as written, near in UTC
        ("0001-01-01T01:00:00+02:00", "0000-12-31T23:00:00+00:00"),  # near, but before year 1 in UTC
        ("2024-02-29T11:45:30.123456Z", datetime(2024, 2, 29, 11, 45, 30, 123456, tzinfo=UTC)),
        ("+294247-01-10T04:00:25.2Z", datetime.max.replace(tzinfo=UTC)),  # 'infinity', as before
    ],
)
def test_a_far_timestamp_is_its_utc_iso_text(sent: str, canonical: object) -> None:
    assert convert(sent, "timestamp") == canonical
    assert timestamp_of_micros(micros_of(canonical)) == canonical  # type: ignore[arg-type]


def test_the_text_orders_and_counts_like_the_calendar() -> None:
    assert days_of("+10000-01-01") - days_of(date(9999, 12, 31)) == 1
    assert days_of(date(1, 1, 1)) - days_of("0000-12-31") == 1
    assert days_of("0000-03-01") - days_of("0000-02-28") == 2  # 1 BC was a leap year
    assert micros_of("0000-12-31T23:59:59.999999+00:00") + 1 == micros_of(datetime(1, 1, 1, tzinfo=UTC))
    assert far_date("-0043-03-15") == far_date("0044-03-15 BC")
    assert far_timestamp("+10000-01-01T00:00:00+00:00") == "+10000-01-01T00:00:00+00:00"
    for bad in ("yesterday", "2024-13-01", "+10000-02-30"):
        with pytest.raises(ValueError):
            far_date(bad)


def test_verify_reads_postgres_text_of_far_values_as_the_stream_sends_them() -> None:
    assert canonical_value("0044-03-15 BC", "date") == convert("-0043-03-15Z", "date")
    assert canonical_value("294276-12-31 23:59:59.999999+00", "timestamp") == convert(
        "+294276-12-31T23:59:59.999999Z", "timestamp"
    )
    assert KEY_TEXT["timestamp"]("-4712-01-01T00:00:00Z") == "-4712-01-01T00:00:00+00:00"
    assert KEY_TEXT["date"]("+10000-01-01Z") == "+10000-01-01"


def test_a_drivers_zero_date_is_its_text_for_verify_to_report_never_a_traceback() -> None:
    assert canonical_value("0000-00-00", "date") == "0000-00-00"
    assert canonical_value("0000-00-00 00:00:00", "timestamp") == "0000-00-00 00:00:00"
