"""The warehouse's decimal columns: a DECIMAL(p,s) where the source bounds the column, exact text elsewhere."""

from decimal import Decimal

import pytest
from pyspark.sql import types as T

from cdcsync.sync.sinks.delta_values import column_kind, decode, encode, kind_of, read_back, spark_type, stored


def test_a_bounded_decimal_is_its_decimal_type_and_any_other_is_text() -> None:
    bounded = {"price": (12, 2), "n": (20, 0)}
    assert column_kind("decimal", "price", bounded) == "decimal(12,2)"
    assert spark_type(column_kind("decimal", "n", bounded)) == T.DecimalType(20, 0)
    assert column_kind("decimal", "amount", bounded) == "decimal"
    assert spark_type("decimal") == T.StringType()
    assert column_kind("int", "price", bounded) == "int"
    # A table made with another decimal type reads as that type's kind.
    assert kind_of(T.DecimalType(38, 10)) == "decimal(38,10)"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("12.50"), "12.5"),
        (Decimal("-0"), "0"),
        (Decimal("1E+2"), "100"),
        (Decimal("-1E-7"), "-0.0000001"),
        (Decimal("NaN"), "NaN"),
        (Decimal("Infinity"), "Infinity"),
        (Decimal("-Infinity"), "-Infinity"),
        (Decimal("1" * 70 + "." + "9" * 30), "1" * 70 + "." + "9" * 30),
        (7, "7"),
    ],
)
def test_an_unbounded_decimal_is_its_exact_digits_and_reads_back_equal(value: Decimal | int, text: str) -> None:
    assert encode("decimal", value, "n") == text
    back = decode("decimal", text)
    assert back == Decimal(value) or (back.is_nan() and Decimal(value).is_nan())


def test_a_bounded_decimal_takes_what_fits_and_rejects_the_rest_never_rounding() -> None:
    assert encode("decimal(12,2)", Decimal("9999999999.99"), "p") == Decimal("9999999999.99")
    assert encode("decimal(12,2)", Decimal("0"), "p") == Decimal(0)
    assert encode("decimal(4,4)", Decimal("0"), "p") == Decimal(0)
    assert encode("decimal(20,0)", 2**64 - 1, "n") == Decimal(2**64 - 1)
    for value, reason in [
        (Decimal("10000000000"), "column p: 10000000000 does not fit DECIMAL(12,2)"),
        (Decimal("1.005"), "column p: 1.005 does not fit DECIMAL(12,2)"),
        (Decimal("NaN"), "column p: NaN does not fit DECIMAL(12,2)"),
    ]:
        with pytest.raises(ValueError) as err:
            encode("decimal(12,2)", value, "p")
        assert str(err.value) == reason
    with pytest.raises(TypeError, match="column p: str '1' is not a decimal"):
        encode("decimal(12,2)", "1", "p")


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("text", "héllo"), ("int", -(2**63)), ("bool", False), ("float", float("nan")), ("float", -0.0),
        ("uuid", "0f8fad5b-d9cb-469f-a165-70867728950e"), ("bits", "0101"), ("geometric", "(1,2)"),
        ("decimal", "12.50"), ("decimal(12,2)", Decimal("1.10")), ("timestamp", 1_709_207_130_123_456),
        ("timestamp", -62_135_596_800_000_001), ("date", 19_782), ("date", -719_163), ("time", "13:45:30.123456"),
        ("bytes", bytearray(b"\x00\xff")), ("json", '{"b": [1, null]}'), ("json", '"bare"'), (None, "[1]"),
    ],
)  # fmt: skip
def test_read_back_gives_each_kinds_stored_form_of_the_value_as_read(kind: str | None, value: object) -> None:
    """What verify's store side digests on the executors equals what ``scan`` reads back."""
    read = read_back(kind)
    back = value if read is None else read(value)
    expected = stored(decode(kind, value))
    assert type(back) is type(expected)
    assert back == expected or back != back and expected != expected  # NaN
