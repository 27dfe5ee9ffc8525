"""The source contract against the real servers, over every kind the registry lists.

One table per kind, the same columns in each database's own words, and the same
questions asked through the kind: its catalog, its rows streamed and paged in
key order, its bytes, rows found again by their ids, its range sums, a
consistent read for a bootstrap. A new kind adds its table's DDL to ``TABLES``
and passes the rest as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdcsync.config import SourceConfig, TableRef
from cdcsync.sources import KINDS, kind_of
from cdcsync.sync import catalog, keys
from cdcsync.sync.mapping import TableMapping
from tests.support import ENV, execute, source_dict, uid

ROWS = 25
# Each kind's table of the same shape: an integer key, text that needs quoting, a date, an exact decimal, bytes.
TABLES = {
    "postgres": (
        "public",
        'CREATE TABLE public."{t}" (id integer PRIMARY KEY, "Name" text, born date, amount numeric(10,2), raw bytea)',
        "INSERT INTO public.\"{t}\" SELECT g, 'o''neil ' || g || ' ✓', DATE '2000-01-01' + g, g * 1.25,"
        " decode(lpad(to_hex(g), 2, '0'), 'hex') FROM generate_series(1, {rows}) g",
        'DROP TABLE IF EXISTS public."{t}"',
    ),
    "mariadb": (
        ENV["MARIADB_DATABASE"],
        "CREATE TABLE `{t}` (id int PRIMARY KEY, `Name` text, born date, amount decimal(10,2), raw varbinary(8))",
        "INSERT INTO `{t}` SELECT seq, CONCAT('o''neil ', seq, ' ✓'), DATE_ADD('2000-01-01', INTERVAL seq DAY),"
        " seq * 1.25, UNHEX(LPAD(HEX(seq), 2, '0')) FROM seq_1_to_{rows}",
        "DROP TABLE IF EXISTS `{t}`",
    ),
}
TYPES = {"id": "int", "Name": "text", "born": "date", "amount": "decimal", "raw": "bytes"}


@pytest.fixture(params=list(KINDS))
def table(request: pytest.FixtureRequest) -> Iterator[tuple[SourceConfig, TableRef]]:
    kind = request.param
    assert kind in TABLES, f"kind {kind}: add its table to TABLES"
    namespace, create, insert, drop = TABLES[kind]
    t = f"contract_{uid()}"
    execute(kind, create.format(t=t), insert.format(t=t, rows=ROWS))
    source = SourceConfig.model_validate(source_dict(kind, f"c{uid()}", [f"{namespace}.{t}"]))
    try:
        yield source, source.tables[0]
    finally:
        execute(kind, drop.format(t=t))


def _mapping(table: TableRef) -> TableMapping:
    return TableMapping(table=str(table), target=table.table, key_columns=("id",), types=TYPES)


def test_the_catalog_names_each_column_s_type_and_the_key(table: tuple[SourceConfig, TableRef]) -> None:
    source, ref = table
    columns = catalog.columns(source, ref)
    assert {c: columns.types[c] for c in TYPES} == TYPES
    assert columns.key == ("id",)
    assert catalog.table_bytes(source, ref) > 0


def test_rows_stream_and_page_in_key_order_with_their_values(table: tuple[SourceConfig, TableRef]) -> None:
    source, ref = table
    streamed = sorted(catalog.source_rows(source, ref), key=lambda row: row["id"])
    paged = list(catalog.source_pages(source, ref, ("id",), page_rows=7))
    assert [row["id"] for row in paged] == list(range(1, ROWS + 1)) == [row["id"] for row in streamed]
    third = paged[2]
    assert third["Name"] == "o'neil 3 ✓" and str(third["amount"]) == "3.75" and bytes(third["raw"]) == b"\x03"
    assert str(third["born"]) == "2000-01-04"
    assert kind_of(source).fetch(source, f"SELECT count(*) FROM {kind_of(source).qualified(ref)}") == [(ROWS,)]


def test_rows_are_found_again_by_their_ids_and_a_stray_id_names_none(table: tuple[SourceConfig, TableRef]) -> None:
    source, ref = table
    found = dict(keys.rows_of(source, ref, _mapping(ref), ["3", "17", "orphan-1", "999"]))
    assert sorted(found) == ["17", "3"]
    assert found["17"]["Name"] == "o'neil 17 ✓"


def test_range_sums_count_every_row_once(table: tuple[SourceConfig, TableRef]) -> None:
    source, ref = table
    kind = kind_of(source)
    sums = kind.checksums
    types, low, high, _estimated = sums.catalog(source, ref, "id") or ({}, 0, 0, 0)
    assert (low, high) == (1, ROWS) and types["id"] in sums.key_types
    bucket = f"({sums.as_bigint(kind.quote('id'))} {sums.integer_division()} 10)"
    text = sums.concat([sums.pieces[1].format(t=sums.forms[(types["id"], "int")].format(c=kind.quote("id")))])
    rows = kind.fetch(source, sums.sums_query(bucket, text, kind.qualified(ref)))
    counted = {int(b): int(n) for b, n, *_ in rows}
    assert counted == {0: 9, 1: 10, 2: 6}
    again = {
        int(b): tuple(int(x) for x in rest)
        for b, *rest in kind.fetch(source, sums.sums_query(bucket, text, kind.qualified(ref)))
    }
    assert again == {int(b): tuple(int(x) for x in rest) for b, *rest in rows}, "a range's sums are stable"


def test_a_consistent_read_counts_and_bounds_the_table(table: tuple[SourceConfig, TableRef]) -> None:
    source, ref = table
    kind = kind_of(source)
    read = kind.reads.snapshot(source).open()
    try:
        name = kind.qualified(ref)
        assert read.session_init()
        assert read.count(name) == ROWS
        assert tuple(int(v) for v in read.key_bounds(name, "id")) == (1, ROWS)
        execute(kind.name, f"DELETE FROM {name} WHERE id = 1")
        if read.one_snapshot:  # one snapshot for every piece: what it saw stays
            assert read.count(name) == ROWS
    finally:
        read.close()


def test_every_kind_connects_and_says_when_it_cannot(table: tuple[SourceConfig, TableRef]) -> None:
    source, _ref = table
    kind = kind_of(source)
    conn: Any = kind.connect(source)
    conn.close()
    wrong = source.model_copy(update={"port": 1})
    with pytest.raises(kind.unreachable):
        kind.connect(wrong, timeout_s=2)
