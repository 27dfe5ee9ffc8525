"""verify's range checksums: Postgres and Spark write every row's text alike, and a planted divergence is found.

Real Postgres and a real Delta table on a real Spark session; no capture: the
warehouse is filled by the sink's own writes from the source's rows, then
differences are planted the way a lost or wrong write would leave them. The
table has a column of each type the checksums cover, with its edge values
(extreme integers, text of every awkward character, far and infinite
timestamps and dates, nulls), quoted mixed-case names and negative keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from cdcsync.config import Config
from cdcsync.events import Change
from cdcsync.sync.catalog import mappings_for, source_rows
from cdcsync.sync.mapping import Row, canonical_doc, doc_id
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.verify import ranges
from cdcsync.sync.verify.compare import verify_follower
from tests.support import ENV, execute, uid

ROWS = 3000
TEXTS = ["", "a,b:c~d", "ünïcødé 😀", 'it\'s "quoted"', "back\\slash", "line\nbreak\ttab", "~", "12:", "-", "x" * 3000]
INFINITE = (41, 42, 43, 44)  # rows whose timestamp or date is infinite: their texts differ on purpose
PLANTED = {"missing": ["7"], "extra": ["-100", "99999"], "stale": ["10", "12", "13", "8", "9"]}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-test-verify-ranges")
    yield session
    session.stop()


@pytest.fixture
def filled(tmp_path: Path, spark: Any) -> Iterator[tuple[Config, str]]:
    """A Postgres table of ``ROWS`` rows of every covered type, the warehouse holding the same; config, table."""
    from bench.common import one_table_doc, three_followers

    tag = f"vr{uid()}"
    table = f"Ranges {tag}"
    texts = "ARRAY[" + ", ".join("'" + t.replace("'", "''") + "'" for t in TEXTS) + "]"
    execute(
        "postgres",
        f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, "Small" smallint, n integer, big bigint, "Note" text,'
        f' label varchar(40), ok boolean, ref uuid, "Seen At" timestamptz, plain timestamp, day date)',
        f'INSERT INTO "{table}" SELECT g, CASE WHEN g % 4 = 0 THEN 32767 WHEN g % 4 = 1 THEN -32768 ELSE g END,'
        f" CASE WHEN g % 2 = 0 THEN 2147483647 ELSE -2147483648 END,"
        f" CASE WHEN g % 3 = 0 THEN 9223372036854775807 ELSE -9223372036854775808 + (g + 3) END,"
        f" CASE WHEN g % 11 = 0 THEN NULL ELSE ({texts})[1 + g % {len(TEXTS)}] || g END,"
        f" CASE WHEN g % 7 = 0 THEN NULL ELSE 'label ' || g END, CASE WHEN g % 5 = 0 THEN NULL ELSE g % 2 = 0 END,"
        f" md5(g::text)::uuid, timestamptz '2026-03-29 01:30:00.000001+02' + g * interval '1 second 1 microsecond',"
        f" timestamp '1999-12-31 23:59:59.999999' + g * interval '1 day',"
        f" CASE WHEN g % 13 = 0 THEN NULL ELSE date '2000-02-29' + g END FROM generate_series(-3, {ROWS}) g",
        f"""UPDATE "{table}" SET "Seen At" = 'infinity' WHERE id = 41""",
        f"""UPDATE "{table}" SET "Seen At" = '-infinity', plain = 'infinity' WHERE id = 42""",
        f"""UPDATE "{table}" SET day = 'infinity' WHERE id = 43""",
        f"""UPDATE "{table}" SET day = '-infinity' WHERE id = 44""",
        f"""UPDATE "{table}" SET "Seen At" = '20000-01-01 00:00:00.5+00', day = '12000-06-01' WHERE id = 45""",
        f"""UPDATE "{table}" SET "Seen At" = '0044-03-15 12:00:00+00 BC', day = '0044-03-15 BC' WHERE id = 46""",
        f"""UPDATE "{table}" SET "Seen At" = NULL, plain = NULL, ok = NULL, ref = NULL, "Note" = NULL WHERE id = 47""",
    )
    doc = one_table_doc(tag, table, three_followers(tag, tmp_path, ["warehouse"]), tmp_path)
    doc["sources"][0]["tables"] = [{"namespace": "public", "table": table}]
    config = Config.model_validate(doc)
    _write(config, spark, lambda row, mapping, doc: [(doc, 1)])
    try:
        yield config, table
    finally:
        execute("postgres", f'DROP TABLE IF EXISTS "{table}"')


def _write(config: Config, spark: Any, changes: Any, extra: Sequence[dict[str, Any]] = ()) -> None:
    """Write ``changes(row, mapping, doc)`` -> [(doc or None, version)] for each source row, and ``extra``."""
    follower = config.followers[0]
    source = config.sources[0]
    mapping = next(iter(mappings_for(config, follower).values()))
    rows = []
    for row in source_rows(source, source.tables[0]):
        for doc, version in changes(row, mapping, canonical_doc(row, mapping)):
            op = "r" if doc is not None else "d"
            change = Change(source.name, mapping.table, op, {"id": row["id"]}, doc, None, version, "test", 0, 0)
            rows.append(Row(change, mapping.target, doc_id(row, mapping), doc))
    for doc in extra:
        change = Change(source.name, mapping.table, "r", {"id": doc["id"]}, doc, None, 1, "test", 0, 0)
        rows.append(Row(change, mapping.target, str(doc["id"]), doc))
    sink = build_sink(config, follower, spark)
    sink.open([mapping])
    assert sink.write(0, rows).applied == len(rows)
    sink.make_visible([mapping.target])
    sink.close()


def _summed(config: Config, spark: Any) -> tuple[ranges.Plan, ranges.Sums, ranges.Sums]:
    """The table's plan and each side's sums of its ranges, every row counted on both sides."""
    follower, source = config.followers[0], config.sources[0]
    mapping = next(iter(mappings_for(config, follower).values()))
    sink = build_sink(config, follower, spark)
    sink.open([mapping])
    plan = ranges.plan(source, source.tables[0], mapping, sink.kinds(mapping.target))
    assert plan is not None, "a table of covered types takes the range checksums"
    there = ranges.source_sums(source, source.tables[0], plan)
    held = ranges.summed(sink.sums(mapping.target, *ranges.store_sums_sql(plan)))
    sink.close()
    assert sum(n for n, _, _ in there.values()) == ROWS + 4 == sum(n for n, _, _ in held.values())
    return plan, there, held


def test_both_engines_write_every_row_alike_so_only_infinite_values_make_a_range_differ(
    filled: tuple[Config, str], spark: Any
) -> None:
    plan, there, held = _summed(filled[0], spark)
    assert len(there) > 100, "the rows are spread over many ranges"
    infinite = {(i - plan.low) // plan.width for i in INFINITE}
    assert set(ranges.differing(there, held)) == infinite


def test_a_planted_divergence_is_found_as_the_row_path_finds_it(
    filled: tuple[Config, str], spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _table = filled

    def planted(row: dict[str, Any], mapping: Any, doc: dict[str, Any]) -> list[tuple[Any, int]]:
        seen = doc["Seen At"]
        changed = {
            7: lambda: None,  # missing: a delete the source never made
            8: lambda: {**doc, "Note": doc["Note"] + " "},  # one more byte of text
            9: lambda: {**doc, "Seen At": seen.replace(microsecond=(seen.microsecond + 1) % 10**6)},
            10: lambda: {**doc, "ok": not doc["ok"]},
            12: lambda: {**doc, "label": None},  # a value lost
            13: lambda: {**doc, "big": doc["big"] - 1},
        }
        return [(changed[row["id"]](), 2)] if row["id"] in changed else []

    # before the first range and after the last
    extra = [{"id": i, "Note": "gone from the source"} for i in (-100, 99_999)]
    _write(config, spark, planted, extra)
    found = {}
    for way in ("ranges", "rows"):
        if way == "rows":
            monkeypatch.setattr(ranges, "plan", lambda *_: None)
        lines: list[str] = []
        sink = build_sink(config, config.followers[0], spark)
        (report,) = verify_follower(config, config.followers[0], sink, pauses=(0.0,), progress=lines.append)
        sink.close()
        assert any("ranges of" in line for line in lines) == (way == "ranges"), lines
        found[way] = (report.missing, report.extra, report.stale, report.source_rows, report.store_rows)
    want = (PLANTED["missing"], PLANTED["extra"], PLANTED["stale"], ROWS + 4, ROWS + 4 - 1 + 2)
    assert found["ranges"] == want == found["rows"]


def test_a_table_of_an_uncovered_type_takes_the_row_path(filled: tuple[Config, str], spark: Any) -> None:
    config, table = filled
    execute("postgres", f'ALTER TABLE "{table}" ADD COLUMN price numeric')
    follower, source = config.followers[0], config.sources[0]
    mapping = next(iter(mappings_for(config, follower).values()))
    kinds = dict(mapping.fields().values())
    assert ranges.plan(source, source.tables[0], mapping, kinds) is None


@pytest.fixture
def maria(tmp_path: Path, spark: Any) -> Iterator[Config]:
    """A MariaDB table of ``ROWS`` rows of every type the checksums cover there, the warehouse holding the same."""
    from bench.common import one_table_doc, three_followers

    tag = f"vm{uid()}"
    table = f"Ranges {tag}"
    database = ENV["MARIADB_DATABASE"]
    texts = ", ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in TEXTS)
    execute(
        "mariadb",
        f"CREATE TABLE `{table}` (id bigint PRIMARY KEY, tiny tinyint, flag tinyint(1), `Small` smallint,"
        " med mediumint, n int, ui int unsigned, big bigint, yr year, `Note` text, label varchar(40), code char(5),"
        " `Seen At` datetime(6), day date) CHARACTER SET utf8mb4",
        f"INSERT INTO `{table}` SELECT g, IF(g % 2 = 0, 127, -128), IF(g % 5 = 0, NULL, g % 3), IF(g % 4 = 0, 32767,"
        " -32768), IF(g % 2 = 0, 8388607, -8388608), IF(g % 2 = 0, 2147483647, -2147483648),"
        " IF(g % 2 = 0, 4294967295, 0), IF(g % 3 = 0, 9223372036854775807, -9223372036854775808 + (g + 3)),"
        f" 1901 + (g + 3) % 255, IF(g % 11 = 0, NULL, CONCAT(ELT(1 + (g + 3) % {len(TEXTS)}, {texts}), g)),"
        " IF(g % 7 = 0, NULL, CONCAT('label ', g)), IF(g % 6 = 0, 'ab', CONCAT('c', g % 10)),"
        " IF(g % 9 = 0, NULL, TIMESTAMPADD(MICROSECOND, g * 1000001, '1969-12-31 23:59:59.999999')),"
        " IF(g % 13 = 0, NULL, DATE_ADD('1000-01-01', INTERVAL g * 997 DAY))"
        " FROM (SELECT CAST(seq AS SIGNED) - 3 AS g FROM seq_0_to_3003) s",
        f"UPDATE `{table}` SET `Seen At` = '9999-12-31 23:59:59.999999', day = '9999-12-31' WHERE id = 45",
        f"UPDATE `{table}` SET `Seen At` = '1000-01-01 00:00:00', day = '1000-01-01' WHERE id = 46",
    )
    doc = one_table_doc(tag, table, three_followers(tag, tmp_path, ["warehouse"]), tmp_path)
    doc["sources"][0].update(
        kind="mariadb",
        port=int(ENV["MARIADB_PORT"]),
        database=database,
        user=ENV["MARIADB_USER"],
        password=ENV["MARIADB_PASSWORD"],
        tables=[{"namespace": database, "table": table}],
    )
    config = Config.model_validate(doc)
    _write(config, spark, lambda row, mapping, doc: [(doc, 1)])
    try:
        yield config
    finally:
        execute("mariadb", f"DROP TABLE IF EXISTS `{table}`")


def test_mariadb_and_spark_write_every_row_alike_and_a_planted_divergence_is_found(
    maria: Config, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, follower = maria, maria.followers[0]
    _plan, there, held = _summed(config, spark)
    assert ranges.differing(there, held) == []

    def planted(row: dict[str, Any], mapping: Any, doc: dict[str, Any]) -> list[tuple[Any, int]]:
        seen = doc["Seen At"]
        changed = {
            7: lambda: None,
            8: lambda: {**doc, "Note": doc["Note"] + " "},
            10: lambda: {**doc, "Seen At": seen.replace(microsecond=(seen.microsecond + 1) % 10**6)},
            12: lambda: {**doc, "flag": not doc["flag"]},
            13: lambda: {**doc, "code": "ab "},
            14: lambda: {**doc, "yr": doc["yr"] + 1},
        }
        return [(changed[row["id"]](), 2)] if row["id"] in changed else []

    _write(config, spark, planted, [{"id": i, "Note": "gone from the source"} for i in (-100, 99_999)])
    found = {}
    for way in ("ranges", "rows"):
        lines: list[str] = []
        sink = build_sink(config, follower, spark)
        ranged = way == "ranges"
        (report,) = verify_follower(config, follower, sink, pauses=(0.0,), progress=lines.append, ranged=ranged)
        sink.close()
        assert any("ranges of" in line for line in lines) == (way == "ranges"), lines
        found[way] = (report.missing, report.extra, report.stale, report.source_rows, report.store_rows)
    want = (["7"], ["-100", "99999"], ["10", "12", "13", "14", "8"], ROWS + 4, ROWS + 4 - 1 + 2)
    assert found["ranges"] == want == found["rows"]
