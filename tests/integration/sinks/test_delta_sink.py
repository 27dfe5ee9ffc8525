"""The Delta Lake sink on real Spark + Delta tables on local disk: apply rule, delete markers, history, bad rows.

One Spark session serves the whole module (the JVM takes ~15 s to start);
each test writes its own tables under its own ``tmp_path``.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from time import sleep
from typing import Any

import pytest

from cdcsync.errors import TableError
from cdcsync.events import Change
from cdcsync.sync.mapping import Row, TableMapping, fingerprint
from cdcsync.sync.verify.sides import digest

TYPES = {
    "price": "decimal",
    "born": "date",
    "seen_at": "timestamp",
    "opens": "time",
    "attrs": "json",
    "blob": "bytes",
    "active": "bool",
    "n": "int",
    "ratio": "float",
    "name": "text",
}
COMPACT_AT = "spark.databricks.delta.autoCompact.minNumFiles"
AUTO_COMPACT = "spark.databricks.delta.autoCompact.enabled"
# Delta's names: a table's retention of replaced files' entries, and a session's default for new tables.
REPLACED_RETENTION = "delta.deletedFileRetentionDuration"
REPLACED_RETENTION_DEFAULT = "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"
# ... and its log checkpoint interval.
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_INTERVAL_DEFAULT = "spark.databricks.delta.properties.defaults.checkpointInterval"
SIMPLE = TableMapping(table="public.items", target="items", types={"n": "int", "name": "text"})


@pytest.fixture(scope="module")
def spark(stack_up: None) -> Iterator[Any]:
    from cdcsync.spark import spark_session

    # Small tables: fewer Delta snapshot/shuffle partitions keep each MERGE to a few tasks on 2 cores.
    conf = {"spark.databricks.delta.snapshotPartitions": "2", "spark.sql.shuffle.partitions": "2"}
    # Not stopped afterwards: other modules of the run share the process-wide session (getOrCreate).
    yield spark_session("cdcsync-test-delta-sink", conf=conf)


def make_sink(spark: Any, tmp_path: Path, *mappings: TableMapping, **options: Any) -> Any:
    from cdcsync.sync.sinks.delta import DeltaSink

    sink = DeltaSink("warehouse", spark, str(tmp_path / "lake"), **options)
    sink.open(list(mappings) or [SIMPLE])
    return sink


def upsert(doc_id: str, version: int, doc: dict[str, Any], target: str = "items") -> Row:
    change = Change("src", "public.items", "u", {"id": doc_id}, dict(doc), 1_709_207_130_123, version, "t", 0, version)
    return Row(change, target, doc_id, doc)


def delete(doc_id: str, version: int, target: str = "items") -> Row:
    change = Change("src", "public.items", "d", {"id": doc_id}, None, 1_709_207_130_456, version, "t", 0, version)
    return Row(change, target, doc_id, None)


def raw(sink: Any, target: str = "items") -> dict[str, dict[str, Any]]:
    """Every row of the table, delete markers included."""
    path = sink._tables[target].path
    return {r["_cdcsync_id"]: r.asDict() for r in sink._spark.read.format("delta").load(path).collect()}


def test_every_type_round_trips_to_its_stored_form(spark: Any, tmp_path: Path) -> None:
    mapping = TableMapping(table="public.items", target="items", types=TYPES)
    sink = make_sink(spark, tmp_path, mapping)
    full = {
        "price": Decimal("12.50"),
        "born": date(2024, 2, 29),
        "seen_at": datetime(2024, 2, 29, 13, 45, 30, 123456, tzinfo=timezone(timedelta(hours=2))),
        "opens": time(13, 45, 30, 123456),
        "attrs": {"b": [1, 2.5, None], "a": {"x": "é"}},
        "blob": b"\x00\xffbin",
        "active": True,
        "n": 2**62,
        "ratio": 0.1,
        "name": "héllo ✓",
        "extra": [1, "a"],  # no declared type: JSON text, column added on first sight
    }
    sparse = {"price": Decimal("-100"), "attrs": "bare string", "n": 0, "extra": "x", "name": None}
    result = sink.write(1, [upsert("1", 10, full), upsert("2", 11, sparse)])
    assert (result.applied, result.older, result.rejected) == (2, 0, [])

    held = sink.held("items")
    assert held == {"1": (10, sink.stored_form(full)), "2": (11, sink.stored_form(sparse))}
    stored = held["1"][1]
    assert stored["seen_at"] == datetime(2024, 2, 29, 11, 45, 30, 123456, tzinfo=UTC)
    assert stored["attrs"] == '{"a": {"x": "\\u00e9"}, "b": [1, 2.5, null]}'
    assert stored["opens"] == "13:45:30.123456" and stored["price"] == Decimal("12.5")
    assert str(held["2"][1]["price"]) == "-100" and held["2"][1]["attrs"] == "bare string"
    assert "name" not in held["2"][1]
    # verify's store side, digested on Spark's Python workers, agrees with digesting what ``scan`` reads
    assert sorted(sink.digests("items", digest)) == sorted((i, digest(doc)) for i, (_, doc) in held.items())

    types = {f.name: f.dataType.simpleString() for f in sink.live("items").schema.fields}
    assert types == {
        "_cdcsync_id": "string", "_cdcsync_version": "bigint", "_cdcsync_deleted": "boolean",
        "_cdcsync_commit_ts": "timestamp", "price": "string", "born": "date", "seen_at": "timestamp",
        "opens": "string", "attrs": "string", "blob": "binary", "active": "boolean", "n": "bigint",
        "ratio": "double", "name": "string", "extra": "string",
    }  # fmt: skip
    utc_text = sink.live("items").selectExpr("date_format(seen_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS')").collect()
    assert sorted(str(r[0]) for r in utc_text) == ["2024-02-29 11:45:30.123456", "None"]
    assert raw(sink)["2"]["extra"] == '"x"'

    # A new sink on the same tables (a restart) reads the same, untyped column included.
    again = make_sink(spark, tmp_path, mapping)
    assert again.held("items") == held


def test_verify_digests_columns_named_with_dots_spaces_and_unicode_as_scan_reads_them(
    spark: Any, tmp_path: Path
) -> None:
    """Spark resolves ``a.b`` as field b of a column a unless the read goes by position."""
    odd = {"a": "int", "a.b": "int", "Order Id": "text", "Ünïcode col": "timestamp"}
    sink = make_sink(spark, tmp_path, TableMapping(table="public.items", target="items", types=odd))
    at = datetime(2026, 1, 1, 12, tzinfo=UTC)
    sink.write(1, [upsert("1", 1, {"a": 1, "a.b": 10, "Order Id": "x", "Ünïcode col": at}),
                   upsert("2", 2, {"a.b": None, "Order Id": "y"})])  # fmt: skip
    held = sink.held("items")
    assert held["1"][1]["a.b"] == 10 and "a.b" not in held["2"][1]
    assert sorted(sink.digests("items", digest)) == sorted((i, digest(doc)) for i, (_, doc) in held.items())


def test_replaying_a_batch_changes_nothing(spark: Any, tmp_path: Path) -> None:
    sink = make_sink(spark, tmp_path)
    batch = [upsert("a", 1, {"n": 1}), upsert("b", 2, {"n": 2}), delete("c", 3)]
    first = sink.write(7, batch)
    assert (first.applied, first.older) == (3, 0)
    before = raw(sink)
    replay = sink.write(7, batch)
    assert (replay.applied, replay.older, replay.rejected) == (0, 3, [])
    assert raw(sink) == before


@pytest.mark.parametrize("soft_delete", [False, True])
def test_delete_leaves_a_marker_that_an_older_replay_cannot_pass(spark: Any, tmp_path: Path, soft_delete: bool) -> None:
    sink = make_sink(spark, tmp_path, soft_delete=soft_delete)
    sink.write(1, [upsert("a", 1, {"n": 1, "name": "first"}), upsert("b", 1, {"n": 9})])
    gone = sink.write(2, [delete("a", 2), delete("never-seen", 5)])
    assert (gone.applied, gone.older) == (2, 0)
    assert sink.held("items") == {"b": (1, {"n": 9})}
    assert [r["_cdcsync_id"] for r in sink.live("items").collect()] == ["b"]

    marker = raw(sink)["a"]
    assert marker["_cdcsync_deleted"] is True and marker["_cdcsync_version"] == 2
    assert (marker["n"], marker["name"]) == ((1, "first") if soft_delete else (None, None))
    assert raw(sink)["never-seen"]["_cdcsync_deleted"] is True

    replay = sink.write(3, [upsert("a", 1, {"n": 1, "name": "first"}), upsert("never-seen", 4, {"n": 4})])
    assert (replay.applied, replay.older) == (0, 2)
    assert sink.held("items") == {"b": (1, {"n": 9})}

    back = sink.write(4, [upsert("a", 3, {"n": 3, "name": "back"})])
    assert back.applied == 1
    assert sink.held("items") == {"a": (3, {"n": 3, "name": "back"}), "b": (1, {"n": 9})}
    assert raw(sink)["a"]["_cdcsync_deleted"] is False


def test_history_records_every_change_once(spark: Any, tmp_path: Path) -> None:
    sink = make_sink(spark, tmp_path, history=True)
    sink.write(1, [upsert("a", 1, {"n": 1}), upsert("b", 1, {"n": 2, "name": "b"})])
    second = [upsert("a", 2, {"n": 10}), delete("b", 3), upsert("c", 1, {"n": 3})]
    sink.write(2, second)
    sink.write(2, second)  # a replay adds nothing
    sink.write(3, [upsert("a", 1, {"n": 1})])  # older for the table, already in the history

    rows = spark.read.format("delta").load(str(tmp_path / "lake/items__history")).collect()
    got = sorted(
        (r["_cdcsync_id"], r["_cdcsync_version"], r["_cdcsync_op"], r["_cdcsync_deleted"], r["_cdcsync_doc"])
        for r in rows
    )
    assert got == [
        ("a", 1, "u", False, fingerprint({"n": 1})),
        ("a", 2, "u", False, fingerprint({"n": 10})),
        ("b", 1, "u", False, fingerprint({"n": 2, "name": "b"})),
        ("b", 3, "d", True, None),
        ("c", 1, "u", False, fingerprint({"n": 3})),
    ]
    assert json.loads(got[0][4]) == {"n": 1}
    commit_times = (
        spark.read.format("delta")
        .load(str(tmp_path / "lake/items__history"))
        .selectExpr("_cdcsync_op", "unix_millis(_cdcsync_commit_ts)")
    )
    assert set(map(tuple, commit_times.collect())) == {("u", 1_709_207_130_123), ("d", 1_709_207_130_456)}


def test_a_batch_of_three_tables_lands_in_each_as_if_written_alone(spark: Any, tmp_path: Path) -> None:
    """One batch's tables are MERGEd two at a time (delta_writers.each_table): each table gets exactly its rows.

    Each table has its own rows, an older replay, a delete, a bad row and a history; the counts add up per
    batch, and every table ends as the same rows written to it alone would leave it.
    """
    names = ("items", "orders", "users")
    mappings = [TableMapping(table=f"public.{t}", target=t, types={"n": "int", "name": "text"}) for t in names]
    sink = make_sink(spark, tmp_path, *mappings, history=True)
    first = [upsert(f"{t}-{i}", 2, {"n": i, "name": f"{t} {i}"}, target=t) for t in names for i in range(50)]
    assert sink.write(1, first).applied == 150

    second = [
        row
        for t in names
        for row in (
            upsert(f"{t}-0", 1, {"n": -1, "name": "older"}, target=t),
            upsert(f"{t}-1", 3, {"n": 100, "name": "x" * 30_000}, target=t),  # a wide row
            delete(f"{t}-2", 3, target=t),
            upsert(f"{t}-bad", 3, {"n": "not a number"}, target=t),
            upsert(f"{t}-new", 3, {"n": 7, "name": t}, target=t),
        )
    ]
    result = sink.write(2, second)
    assert (result.applied, result.older, sorted(r.doc_id for r, _ in result.rejected)) == (
        9, 3, [f"{t}-bad" for t in names]
    )  # fmt: skip
    for t in names:
        want = {f"{t}-{i}": (2, {"n": i, "name": f"{t} {i}"}) for i in range(50) if i not in (1, 2)}
        want |= {f"{t}-1": (3, {"n": 100, "name": "x" * 30_000}), f"{t}-new": (3, {"n": 7, "name": t})}
        assert sink.held(t) == want, t
        history = spark.read.format("delta").load(str(tmp_path / f"lake/{t}__history"))
        assert history.count() == 50 + 4, t  # every change but the bad row's: the older one is a change too


def test_a_publish_of_three_staged_tables_replaces_each_live_table_with_its_own(spark: Any, tmp_path: Path) -> None:
    """A bootstrap's publish overwrites two tables at a time: each live table ends as its own staged one."""
    names = ("items", "orders", "users")
    mappings = [TableMapping(table=f"public.{t}", target=t, types={"n": "int", "name": "text"}) for t in names]
    live = make_sink(spark, tmp_path, *mappings)
    live.write(1, [upsert(f"{t}-old", 9, {"n": 0, "name": "orphan"}, target=t) for t in names])
    reindex = make_sink(spark, tmp_path / "other", *mappings)
    reindex.path = str(tmp_path / "lake")
    reindex.stage(mappings)
    staged = [upsert(f"{t}-{i}", 5, {"n": i, "name": t}, target=t) for n, t in enumerate(names) for i in range(n + 1)]
    assert reindex.write(1, staged).applied == 6
    reindex.publish()
    for n, t in enumerate(names):
        assert live.held(t) == {f"{t}-{i}": (5, {"n": i, "name": t}) for i in range(n + 1)}, t
        assert not (tmp_path / f"lake/{t}__staging").exists()


@pytest.mark.parametrize("soft_delete", [False, True])
def test_a_staged_table_filled_as_a_load_publishes_what_merging_each_batch_would(
    spark: Any, tmp_path: Path, soft_delete: bool
) -> None:
    """A bootstrap's staged table is spooled and loaded once (``delta_load``); the MERGE path is the reference.

    The same batches (updates across batches, an older version replayed later, deletes of a known and an
    unknown id, an id deleted then written again, a column learned half-way, a bad row, a wide row) go to
    a spooled staging and to one MERGEd batch by batch: both publish the same table, delete markers and
    column types included, the same history, and the staged rows read the same before the publish.
    """
    mapping = TableMapping(table="public.items", target="items", types={"n": "int", "name": "text", "price": "decimal"})
    wider = replace(mapping, types={**mapping.types, "born": "date"})
    batches = [
        [upsert(f"k{i}", 1, {"n": i, "name": f"item {i}", "price": Decimal("1.50")}) for i in range(40)],
        [upsert("k1", 3, {"n": 100, "name": "x" * 40_000}), delete("k2", 3), delete("ghost", 4), upsert("k3", 2, {})],
        [upsert("k1", 2, {"n": -1, "name": "older"}), upsert("k4", 5, {"n": "bad"}), upsert("k2", 6, {"n": 2})],
        [upsert("k5", 7, {"n": 5, "born": date(2024, 2, 29)}), delete("k6", 7), upsert("k6", 6, {"n": -6})],
    ]

    def filled(where: str, spooled: bool) -> Any:
        sink = make_sink(spark, tmp_path / where, mapping, soft_delete=soft_delete, history=True)
        sink.spooled_fill = spooled
        sink.stage([mapping])
        counts = []
        for n, batch in enumerate(batches):
            if n == 3:
                sink.learn(wider)
            result = sink.write(n, batch)
            counts.append((result.applied + result.older, [r.doc_id for r, _ in result.rejected]))
        before = sink.held("items")
        sink.publish()
        history = spark.read.format("delta").load(str(tmp_path / where / "lake/items__history"))
        return sink, counts, before, sorted(map(tuple, history.drop("_cdcsync_commit_ts").collect()))

    loaded, counts, staged, history = filled("load", True)
    merged, counts_merged, staged_merged, history_merged = filled("merge", False)
    assert counts == counts_merged  # applied + older per batch: what the MERGE splits, the load counts as applied
    assert staged == staged_merged and loaded.held("items") == merged.held("items")
    assert raw(loaded) == raw(merged)  # delete markers, versions and commit times too
    assert history == history_merged
    schema = spark.read.format("delta").load(str(tmp_path / "load/lake/items")).schema
    assert schema == spark.read.format("delta").load(str(tmp_path / "merge/lake/items")).schema
    assert not list((tmp_path / "load/lake").glob("*__spool")) and not list((tmp_path / "load/lake").glob("*staging"))


def test_a_bad_row_is_rejected_and_the_rest_applied(spark: Any, tmp_path: Path) -> None:
    mapping = TableMapping(
        table="public.items", target="items", types={"n": "int", "price": "decimal"}, decimals={"price": (12, 2)}
    )
    sink = make_sink(spark, tmp_path, mapping)
    text_in_int = upsert("bad1", 1, {"n": "twelve"})
    too_precise = upsert("bad2", 1, {"n": 1, "price": Decimal("1.001")})
    rows = [upsert("ok", 1, {"n": 1, "price": Decimal("3.25")}), text_in_int, too_precise, upsert("ok2", 2, {"n": 2})]
    result = sink.write(1, rows)

    assert result.applied == 2 and result.older == 0
    assert [(r.doc_id, reason) for r, reason in result.rejected] == [
        ("bad1", "column n: str 'twelve' is not an int"),
        ("bad2", "column price: 1.001 does not fit DECIMAL(12,2)"),
    ]
    assert result.applied + result.older + len(result.rejected) == len(rows)
    assert sink.held("items") == {"ok": (1, {"n": 1, "price": Decimal("3.25")}), "ok2": (2, {"n": 2})}


def test_decimal_columns_hold_every_value_their_source_column_does(spark: Any, tmp_path: Path) -> None:
    """A source-bounded decimal is a DECIMAL(p,s); any other decimal exact text; an older table's type is kept.

    A Postgres numeric holds NaN, ±Infinity and, unconstrained, any number of digits: no DECIMAL does.
    """
    numbers = {"n": "decimal", "m": "decimal"}
    mapping = TableMapping(table="public.items", target="items", types=numbers, decimals={"m": (20, 0)})
    sink = make_sink(spark, tmp_path, mapping)
    wide = Decimal("-" + "9" * 70 + "." + "1" * 30)
    docs = {
        "nan": {"n": Decimal("NaN"), "m": Decimal(2**64 - 1)},
        "inf": {"n": Decimal("-Infinity"), "m": Decimal(0)},
        "wide": {"n": wide, "m": Decimal(-1)},
        "small": {"n": Decimal("1.50E-7")},
    }
    result = sink.write(1, [upsert(k, 1, doc) for k, doc in docs.items()])
    assert (result.applied, result.rejected) == (4, [])
    types = {f.name: f.dataType.simpleString() for f in sink.live("items").schema.fields}
    assert (types["n"], types["m"]) == ("string", "decimal(20,0)")
    assert {k: r["n"] for k, r in raw(sink).items()} == {
        "nan": "NaN",
        "inf": "-Infinity",
        "wide": str(wide),
        "small": "0.00000015",
    }
    held = {k: doc for k, (_, doc) in sink.held("items").items()}
    assert held["nan"]["n"].is_nan() and held["nan"]["m"] == 2**64 - 1
    assert held["inf"]["n"] == Decimal("-Infinity") and held["wide"]["n"] == wide
    assert held["small"] == {"n": Decimal("0.00000015")}

    # A table made when every decimal was DECIMAL(38,10) keeps that column: no reindex forced on an upgrade.
    lake = tmp_path / "lake"
    spark.sql(f"ALTER TABLE delta.`{lake}/items` ADD COLUMNS (old DECIMAL(38,10))")
    older = TableMapping(table="public.items", target="items", types={**numbers, "old": "decimal"})
    reopened = make_sink(spark, tmp_path, older)
    assert reopened.write(2, [upsert("nan", 2, {"old": Decimal("3.25")})]).applied == 1
    assert reopened.held("items")["nan"][1] == {"old": Decimal("3.25")}
    rejected = reopened.write(3, [upsert("inf", 2, {"old": Decimal("NaN")})]).rejected
    assert [reason for _, reason in rejected] == ["column old: NaN does not fit DECIMAL(38,10)"]


def test_reopen_adds_new_columns_and_refuses_a_changed_type(spark: Any, tmp_path: Path) -> None:
    sink = make_sink(spark, tmp_path)
    sink.write(1, [upsert("a", 1, {"n": 1})])
    wider = TableMapping(table="public.items", target="items", types={**SIMPLE.types, "at": "timestamp"})
    reopened = make_sink(spark, tmp_path, wider)
    at = datetime(2000, 1, 1, tzinfo=UTC)
    assert reopened.write(2, [upsert("b", 1, {"n": 2, "at": at})]).applied == 1
    assert reopened.held("items") == {"a": (1, {"n": 1}), "b": (1, {"n": 2, "at": at})}

    changed = TableMapping(table="public.items", target="items", types={"n": "text"})
    with pytest.raises(TableError, match="column n is bigint, the mapping wants string"):  # held alone (sync.held)
        make_sink(spark, tmp_path, changed)


def test_two_sinks_on_one_table_take_turns_instead_of_conflicting(spark: Any, tmp_path: Path) -> None:
    """The daemon's sink and a reindex's second instance both write the live table (snapshot.reindex, steps 4-5).

    Every MERGE reads the whole table, so two at once conflict in Delta's
    optimistic commit; a reindex catching up while the daemon merges every
    few seconds could lose every retry. Here two writers start each round at
    the same moment: none may fail, and both rounds' rows and history land.
    """
    sinks = [make_sink(spark, tmp_path, history=True) for _ in range(2)]
    start, errors = threading.Barrier(2), []

    def writer(n: int) -> None:
        for round_ in range(1, 4):
            rows = [upsert(f"{n}-{i}", round_, {"n": i, "name": "x" * 2000}) for i in range(300)]
            start.wait()
            try:
                assert sinks[n].write(round_, rows).applied == 300
            except Exception as err:  # noqa: BLE001 - reported below, with the other writer's
                errors.append(f"writer {n}, round {round_}: {err}"[:400])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert {doc_id: version for doc_id, (version, _) in sinks[0].held("items").items()} == {
        f"{n}-{i}": 3 for n in range(2) for i in range(300)
    }
    assert spark.read.format("delta").load(str(tmp_path / "lake/items__history")).count() == 2 * 300 * 3


def test_a_read_whose_table_a_reindex_replaced_meanwhile_is_read_again(spark: Any, tmp_path: Path) -> None:
    """A reindex publishes (one overwrite, a column retyped) between ``held``'s plan and its run.

    Delta refuses to run a read planned on the table's previous schema
    (DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS): ``verify``, or anything that reads
    the warehouse while a reindex of it finishes, failed on it in CI. The
    read is planned again on the new version and returns its rows.
    """
    sink = make_sink(spark, tmp_path)
    sink.write(1, [upsert("a", 1, {"n": 1, "name": "x"}), upsert("b", 2, {"n": 2, "name": "y"})])
    retyped = TableMapping(table="public.items", target="items", types={"n": "text", "name": "text"})
    reindex = make_sink(spark, tmp_path / "other")
    reindex.path = str(tmp_path / "lake")
    reindex.stage([retyped])
    reindex.write(1, [upsert("a", 5, {"n": "one", "name": "x"}), upsert("b", 6, {"n": "two", "name": "y"})])

    planned, replaced = sink.live, []

    def plan_then_publish(target: str) -> Any:
        frame = planned(target)  # planned on the table as it is now (n: bigint)
        if not replaced:
            reindex.publish()  # ... and replaced before the plan runs
            replaced.append(target)
        return frame

    sink.live = plan_then_publish  # type: ignore[method-assign]
    held = sink.held("items")
    assert replaced == ["items"]
    assert {doc_id: version for doc_id, (version, _) in held.items()} == {"a": 5, "b": 6}
    assert {doc["n"] for _, doc in held.values()} == {"one", "two"}


def test_a_table_that_keeps_gaining_rows_stays_in_few_files(spark: Any, tmp_path: Path) -> None:
    """Each MERGE adds a file or more of new rows; Delta removes a file only once all its rows are replaced.

    A table that gains rows (inserts) would keep every file of every MERGE, and
    each MERGE reads them all. Auto compaction, on by default
    (``cdcsync.spark``), rewrites them once this process's commits leave
    ``minNumFiles`` small ones; the threshold is lowered here so that a few
    MERGEs cross it. The sink's rows are unchanged by it, history included.
    """
    from delta.tables import DeltaTable

    sink = make_sink(spark, tmp_path, history=True)
    threshold = spark.conf.get(COMPACT_AT)
    spark.conf.set(COMPACT_AT, "6")
    expected: dict[str, tuple[int, dict[str, Any]]] = {}
    try:
        for batch in range(8):
            rows = [upsert(f"k{batch}-{i}", batch + 1, {"n": i, "name": "row " * 20}) for i in range(200)]
            rows.append(upsert("hot", batch + 1, {"n": batch, "name": "updated every batch"}))
            assert sink.write(batch, rows).applied == len(rows)
            expected.update({r.doc_id: (r.version, r.doc) for r in rows})
    finally:
        spark.conf.set(COMPACT_AT, threshold)
    for table in ("items", "items__history"):
        files = DeltaTable.forPath(spark, str(tmp_path / "lake" / table)).detail().collect()[0]["numFiles"]
        assert files < 6, f"{table}: {files} files after 8 MERGEs"
    assert sink.held("items") == expected
    history = spark.read.format("delta").load(str(tmp_path / "lake/items__history"))
    assert history.count() == 8 * 201


def test_auto_compaction_runs_after_a_tables_first_write_then_only_at_the_threshold(spark: Any, tmp_path: Path) -> None:
    """Delta's rule, as docs/performance.md states it: a table's first write in a process compacts its small files.

    Delta counts a table's small files from this process's own commits, and
    takes a table it has not compacted yet as due. So a daemon that starts
    compacts each table once, at its first MERGE; afterwards only once
    ``minNumFiles`` (200) small files are counted. Two later MERGEs of a few
    files each compact nothing, and the rows are the sink's.

    A MERGE of inserts writes one file (its source is one partition), so the
    table first gets two files with auto compaction off, as a table written
    by an earlier run of the daemon would hold them.
    """
    from delta.tables import DeltaTable

    sink = make_sink(spark, tmp_path)
    expected: dict[str, tuple[int, dict[str, Any]]] = {}
    enabled = spark.conf.get(AUTO_COMPACT)
    try:
        for batch in range(5):
            spark.conf.set(AUTO_COMPACT, "false" if batch < 2 else enabled)
            rows = [upsert(f"k{batch}-{i}", batch + 1, {"n": i, "name": "row " * 20}) for i in range(200)]
            assert sink.write(batch, rows).applied == len(rows)
            expected.update({r.doc_id: (r.version, r.doc) for r in rows})
    finally:
        spark.conf.set(AUTO_COMPACT, enabled)
    history = DeltaTable.forPath(spark, str(tmp_path / "lake/items")).history().orderBy("version").collect()
    operations = [r["operation"] for r in history]
    assert operations == ["CREATE TABLE", "MERGE", "MERGE", "MERGE", "OPTIMIZE", "MERGE", "MERGE"], operations
    assert history[4]["operationParameters"]["auto"] == "true"
    assert sink.held("items") == expected


def _replaced_entries(spark: Any, path: str) -> int:
    """Replaced files' entries in the table's latest version's state (Delta's ``Snapshot.tombstones``)."""
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return int(log.unsafeVolatileSnapshot().tombstones().count())


def test_replaced_files_leave_a_tables_state_after_their_retention(spark: Any, tmp_path: Path) -> None:
    """Every MERGE reads its table version's whole state, which keeps an entry for each file a commit replaced.

    Delta keeps those for a week by default: a table MERGEd every few seconds
    gains ~6 a MERGE, and each 20,000 made a MERGE ~0.2 s slower and a log
    checkpoint ~1.6 s slower (docs/performance.md). The sink's tables keep
    them for the session's retention (``delta.replaced_file_retention``;
    20 s here): new tables and tables an earlier cdcsync created, but not a
    table whose retention an operator set.
    """
    from delta.tables import DeltaTable

    before = spark.conf.get(REPLACED_RETENTION_DEFAULT, None)
    lake = tmp_path / "lake"
    spark.conf.unset(REPLACED_RETENTION_DEFAULT)  # as an earlier cdcsync created its tables: Delta's week
    make_sink(spark, tmp_path, replace(SIMPLE, target="old"), replace(SIMPLE, target="set"))
    spark.sql(f"ALTER TABLE delta.`{lake / 'set'}` SET TBLPROPERTIES ('{REPLACED_RETENTION}' = 'interval 30 days')")
    spark.conf.set(REPLACED_RETENTION_DEFAULT, "interval 20 seconds")
    try:
        sink = make_sink(spark, tmp_path, *(replace(SIMPLE, target=t) for t in ("items", "old", "set")))

        def retention(target: str) -> str | None:
            detail = DeltaTable.forPath(spark, str(lake / target)).detail().collect()[0]
            return (detail["properties"] or {}).get(REPLACED_RETENTION)

        assert retention("items") == "interval 20 seconds"  # new: the session's default
        assert retention("old") == "interval 20 seconds"  # an earlier cdcsync's table: given it on open
        assert retention("set") == "interval 30 days"  # the operator's own: left alone

        for version in (1, 2, 3):  # each batch replaces the rows, and so the files, the last one wrote
            sink.write(version, [upsert(f"k{i}", version, {"n": version, "name": "x"}) for i in range(50)])
        held = _replaced_entries(spark, str(lake / "items"))
        assert held > 0
        sleep(21)
        sink.write(4, [upsert(f"k{i}", 4, {"n": 4, "name": "x"}) for i in range(50)])
        assert _replaced_entries(spark, str(lake / "items")) < held  # only the last batch's: the others' have expired
        assert sink.held("items") == {f"k{i}": (4, {"n": 4, "name": "x"}) for i in range(50)}
    finally:
        if before is None:
            spark.conf.unset(REPLACED_RETENTION_DEFAULT)
        else:
            spark.conf.set(REPLACED_RETENTION_DEFAULT, before)


def _checkpoint_versions(path: Path) -> list[int]:
    """The versions of the table's log that have a checkpoint, oldest first."""
    return sorted(int(f.name.split(".")[0]) for f in (path / "_delta_log").glob("*.checkpoint*.parquet"))


def test_log_checkpoints_are_written_beside_the_batches(spark: Any, tmp_path: Path) -> None:
    """Delta writes a table's log checkpoint inside every tenth commit, and that MERGE waits for it.

    In the daemon those batches took ~40 % longer than their neighbours
    (docs/performance.md, "Delta: log checkpoints beside the batch"). The
    sink's tables carry an interval of 1,000 (a fallback for other writers),
    new ones and those an earlier cdcsync created, and the sink writes their
    checkpoints every 10 versions on a thread of its own. A table whose
    interval an operator set keeps Delta's own checkpoints at that interval.
    """
    from delta.tables import DeltaTable

    from cdcsync.spark import CHECKPOINT_INTERVAL as INTERVAL

    before = spark.conf.get(CHECKPOINT_INTERVAL_DEFAULT, None)
    lake = tmp_path / "lake"
    spark.conf.unset(CHECKPOINT_INTERVAL_DEFAULT)  # as an earlier cdcsync created its tables: Delta's 10
    make_sink(spark, tmp_path, replace(SIMPLE, target="old"), replace(SIMPLE, target="set"))
    spark.sql(f"ALTER TABLE delta.`{lake / 'set'}` SET TBLPROPERTIES ('{CHECKPOINT_INTERVAL}' = '5')")
    spark.conf.set(CHECKPOINT_INTERVAL_DEFAULT, before or INTERVAL)
    targets = ("items", "old", "set")
    sink = make_sink(spark, tmp_path, *(replace(SIMPLE, target=t) for t in targets))

    def interval(target: str) -> str | None:
        detail = DeltaTable.forPath(spark, str(lake / target)).detail().collect()[0]
        return (detail["properties"] or {}).get(CHECKPOINT_INTERVAL)

    assert interval("items") == INTERVAL  # new: the session's default
    assert interval("old") == INTERVAL  # an earlier cdcsync's table: given it on open
    assert interval("set") == "5"  # the operator's own: left alone
    for version in range(1, 13):
        rows = [upsert(f"k{i}", version, {"n": version, "name": "x"}, target=t) for t in targets for i in range(20)]
        sink.write(version, rows)
    sink.close()  # waits for a checkpoint being written
    for target in ("items", "old"):
        written = _checkpoint_versions(lake / target)
        # Delta's own would come at version 1,000 only: these are the sink's, one per 10 versions at least.
        assert written and max(written) >= 10, (target, written)
        assert all(v % int(INTERVAL) for v in written), (target, written)
    assert _checkpoint_versions(lake / "set") and all(v % 5 == 0 for v in _checkpoint_versions(lake / "set"))
    reader = make_sink(spark, tmp_path, *(replace(SIMPLE, target=t) for t in targets))
    for target in targets:  # a new reader starts from the checkpoint and the commits after it
        assert reader.held(target) == {f"k{i}": (12, {"n": 12, "name": "x"}) for i in range(20)}
    reader.close()


def test_a_merge_reads_its_source_as_one_partition(spark: Any, tmp_path: Path) -> None:
    """The batch a MERGE joins is one partition, whatever the task slots; the MERGE still lands every row.

    A MERGE reads its source in ~6 of its jobs (the broadcasts of its joins);
    split into a partition per slot, each of those ran a task per slot over a
    few rows (docs/performance.md, "Delta: the MERGE's source in one partition").
    """
    from pyspark.sql import types as T

    from cdcsync.sync.sinks.delta_values import frame

    assert spark.sparkContext.defaultParallelism > 1  # else one partition proves nothing
    schema = T.StructType([T.StructField("id", T.StringType()), T.StructField("n", T.LongType())])
    assert frame(spark, [(str(i), i) for i in range(5000)], schema).rdd.getNumPartitions() == 1
    sink = make_sink(spark, tmp_path)
    rows = [upsert(f"k{i}", 2, {"n": i, "name": f"row {i}"}) for i in range(5000)]
    assert sink.write(1, rows).applied == 5000
    assert sink.held("items") == {r.doc_id: (2, r.doc) for r in rows}


# Keys a MERGE's key predicate must name exactly: quotes, backslashes, unicode, SQL text, an empty key, a long
# composite key (sync.keys: JSON of the key's columns).
ODD_KEYS = [
    "it's", 'say "hi"', "back\\slash", "ünïcödé €", "😀", "tab\tand\nnewline", "' OR '1'='1", "%_*", "", "`tick`",
    "X'00'", "CAST(1 AS STRING)", json.dumps({"id": 7, "region": "eu'west", "sku": "é" * 300}),
]  # fmt: skip


def test_the_key_predicate_holds_exactly_the_batchs_keys(spark: Any) -> None:
    from cdcsync.sync.sinks.delta_values import among

    keys = ODD_KEYS + [f"k{i}" for i in range(200)]
    near = ["it''s", "back\\\\slash", "k1 ", "K1", "k", "ünïcödé", "' OR '1'='1'", "X'0'", "x"]
    table = spark.createDataFrame([(k,) for k in keys + near], "_cdcsync_id string").alias("t")
    found = [r[0] for r in table.where(among("t._cdcsync_id", keys, chunk=16)).collect()]
    assert sorted(found) == sorted(keys)


@pytest.mark.parametrize("soft_delete", [False, True])
def test_a_merge_pruned_by_key_lands_what_the_plain_merge_does(
    spark: Any, tmp_path: Path, soft_delete: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MERGE's key predicate (``among``) changes which pages the MERGE reads, never which rows it matches.

    The same batches (inserts, updates, an older replay, deletes of known and unknown keys, keys deleted and
    written again), with odd keys among plain ones, go to a table MERGEd with the predicate and to one
    MERGEd without: the same rows, delete markers and versions, and the same counts.
    """
    from cdcsync.sync.sinks import delta_merge as delta_sink

    keys = ODD_KEYS + [f"k{i}" for i in range(150)]
    batches = [
        [upsert(k, 1, {"n": i, "name": k}) for i, k in enumerate(keys)],
        [upsert(k, 2, {"n": -i}) for i, k in enumerate(keys[::2])] + [delete(k, 2) for k in keys[1:40:2]]
        + [delete("ghost'", 2)],
        [upsert(k, 1, {"n": 99}) for k in keys[:30]] + [upsert(k, 3, {"n": 3, "name": "back"}) for k in keys[1:20:2]],
    ]  # fmt: skip

    def merged(where: str, prune: bool) -> tuple[dict[str, Any], list[tuple[int, int, int]]]:
        monkeypatch.setattr(delta_sink, "PRUNE_BY_KEY", prune)
        sink = make_sink(spark, tmp_path / where, soft_delete=soft_delete)
        results = [sink.write(n, batch) for n, batch in enumerate(batches)]
        return raw(sink), [(r.applied, r.older, len(r.rejected)) for r in results]

    pruned, counts = merged("pruned", True)
    plain, counts_plain = merged("plain", False)
    assert counts == counts_plain and pruned == plain
    assert set(pruned) == {*keys, "ghost'"}


def test_a_load_writes_the_table_in_ranges_of_ids_each_file_in_order(spark: Any, tmp_path: Path) -> None:
    """A publish's files each hold one range of ids, in id order: the layout the MERGE's key predicate prunes by
    page (docs/performance.md, "Delta: a MERGE that prunes by key"). Auto compaction off: it would join the files."""
    import pyarrow.parquet as pq

    ids = [f"k{i}" for i in range(3000)]
    random.Random(1).shuffle(ids)
    enabled = spark.conf.get(AUTO_COMPACT)
    spark.conf.set(AUTO_COMPACT, "false")
    try:
        sink = make_sink(spark, tmp_path)
        sink.stage([SIMPLE])
        for n in range(3):
            sink.write(n, [upsert(k, 1, {"n": 1}) for k in ids[n::3]])
        sink.publish()
    finally:
        spark.conf.set(AUTO_COMPACT, enabled)
    runs = [pq.read_table(f, columns=["_cdcsync_id"]).column(0).to_pylist()
            for f in (tmp_path / "lake/items").glob("*.parquet")]  # fmt: skip
    assert len(runs) > 1 and sorted(k for run in runs for k in run) == sorted(ids)
    assert all(run == sorted(run) for run in runs)
    spans = sorted((run[0], run[-1]) for run in runs)
    assert all(before[1] < after[0] for before, after in zip(spans, spans[1:], strict=False))
