"""Tables shaped like production ones converge in all three stores: large values, partitions, mixed-case names.

Each scenario here once lost changes with every status green: an UPDATE that
left a large (TOASTed) value alone overwrote it in the stores with Debezium's
placeholder, and every streamed change of a partitioned table was dropped
because Postgres published it under the partition's name. Each ends with
``verify`` clean in every store, and reads the stores through their own
clients for the values that went wrong.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdcsync import metrics
from cdcsync.connectors.apply import apply, client_for
from cdcsync.connectors.source_setup import carry_out, plan
from cdcsync.connectors.watch import CaptureWatch
from cdcsync.errors import PreflightError
from cdcsync.names import default_target
from cdcsync.sync.mapping import PLACEHOLDER
from cdcsync.sync.values import decimal_text
from tests.integration.followers import scenario
from tests.support import (
    config_for,
    drop_capture,
    execute,
    maria_connect,
    pg_connect,
    read_topic,
    source_dict,
    uid,
    wait_streaming,
)

FOLLOWERS = ("search", "cache", "warehouse")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-real-schemas-tests")
    yield session
    session.stop()


def _identity(schema: str, table: str) -> str:
    with pg_connect() as conn:
        row = conn.execute(
            "SELECT c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s",
            (schema, table),
        ).fetchone()
    assert row is not None, (schema, table)
    return str(row[0])


def test_an_update_that_leaves_large_values_alone_keeps_them_in_every_store(spark: Any, tmp_path: Path) -> None:
    """Values stored out of line (incompressible, tens of KB) survive an UPDATE of another column."""
    table = f"toast_{uid()}"
    big = {i: os.urandom(12_000).hex() for i in (1, 2, 3)}  # 24 KB of text each: TOASTed even after compression
    ddl = [f"CREATE TABLE {table} (id int PRIMARY KEY, big text, blob bytea, doc jsonb, n int NOT NULL)"]
    ddl += [
        f"INSERT INTO {table} VALUES ({i}, '{text}', decode('{os.urandom(9_000).hex()}', 'hex'),"
        f" jsonb_build_object('k', '{text[:8000]}'), 0)"
        for i, text in big.items()
    ]
    with scenario(spark, tmp_path, {"postgres": [f"public.{table}"]}, {"postgres": ddl}) as sc:
        assert _identity("public", table) == "f"  # set by apply: the table has columns Postgres may store out of line
        sc.run_once()
        execute("postgres", f"UPDATE {table} SET n = n + 1", f"UPDATE {table} SET n = n + 1 WHERE id = 2")
        sc.run_once()
        sc.assert_converged()
        for follower in FOLLOWERS:
            held = sc.held(follower, table)
            assert {k: int(doc["n"]) for k, (_, doc) in held.items()} == {"1": 1, "2": 2, "3": 1}, follower
            for key, (_, doc) in held.items():
                assert doc["big"] == big[int(key)], (follower, key)
                assert PLACEHOLDER not in str(doc), (follower, key)


def test_a_partitioned_table_with_a_mixed_case_name_streams_every_change_under_its_parent(
    spark: Any, tmp_path: Path
) -> None:
    """Inserts into each partition, an update moving a row to another partition, a partition made while streaming."""
    schema = f"Sales_{uid()}"
    parent = f'"{schema}"."Events"'
    ddl = [
        f'CREATE SCHEMA "{schema}"',
        f"CREATE TABLE {parent} (day date, id int, v int NOT NULL, note text, PRIMARY KEY (day, id))"
        " PARTITION BY RANGE (day)",
        *(
            f'CREATE TABLE "{schema}"."Events_{y}" PARTITION OF {parent}'
            f" FOR VALUES FROM ('{y}-01-01') TO ('{y + 1}-01-01')"
            for y in (2024, 2025)
        ),
        f"INSERT INTO {parent} VALUES ('2024-03-01', 1, 1, 'a'), ('2025-03-01', 2, 2, 'b')",
    ]
    try:
        with scenario(spark, tmp_path, {"postgres": [f"{schema}.Events"]}, {"postgres": ddl}) as sc:
            assert _identity(schema, "Events_2024") == "f" and _identity(schema, "Events_2025") == "f"
            sc.run_once()
            sc.assert_converged()
            execute(
                "postgres",
                f"INSERT INTO {parent} VALUES ('2024-06-01', 3, 3, 'c'), ('2025-06-01', 4, 4, 'd')",
                f"UPDATE {parent} SET v = v + 10 WHERE id IN (1, 2)",
                f"UPDATE {parent} SET day = '2025-04-01' WHERE id = 3",  # moves the row to the other partition
                f"DELETE FROM {parent} WHERE id = 4",
                f'CREATE TABLE "{schema}"."Events_2026" PARTITION OF {parent}'
                " FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
                f"INSERT INTO {parent} VALUES ('2026-01-02', 5, 5, 'e')",
            )
            assert _identity(schema, "Events_2026") == "d"  # Postgres' default for a new partition
            CaptureWatch(sc.config).tick()  # the daemon's watchdog: its first tick checks the source's setup
            assert _identity(schema, "Events_2026") == "f"
            sc.run_once()
            sc.assert_converged()
            for follower in FOLLOWERS:
                held = sc.held(follower, "events")
                rows = sorted((int(doc["id"]), int(doc["v"])) for _, doc in held.values())
                assert rows == [(1, 11), (2, 12), (3, 3), (5, 5)], (follower, rows)

            # A table with rows attached as a partition: no INSERT reaches the WAL, so the watch has capture
            # snapshot that partition's rows; then one detached, whose rows no change removes: said, not silent.
            execute(
                "postgres",
                f'CREATE TABLE "{schema}"."Events_2027" (day date, id int, v int NOT NULL, note text,'
                " PRIMARY KEY (day, id))",
                f"""INSERT INTO "{schema}"."Events_2027" SELECT '2027-01-01'::date + g, 100 + g, g, 'x' """
                "FROM generate_series(1, 50) g",
                f'ALTER TABLE {parent} ATTACH PARTITION "{schema}"."Events_2027"'
                " FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')",
            )
            CaptureWatch(sc.config).tick()
            deadline = time.monotonic() + 120
            while True:  # the snapshot runs in the background, in chunks
                sc.run_once()
                dirty = [r.as_dict() for r in sc.verify() if not r.clean]
                if not dirty or time.monotonic() > deadline:
                    break
                time.sleep(3)
            assert not dirty, json.dumps(dirty)[:2000]
            assert all(len(sc.held(f, "events")) == 54 for f in FOLLOWERS)

            execute("postgres", f'ALTER TABLE {parent} DETACH PARTITION "{schema}"."Events_2024"')
            watch = CaptureWatch(sc.config)
            watch.tick()
            healthy, problems = watch.health()
            assert not healthy and any(f"{schema}.Events_2024 left {schema}.Events" in p for p in problems), problems
    finally:
        execute("postgres", f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_an_existing_publication_is_made_to_publish_partitions_under_their_root() -> None:
    """Debezium creates a new publication with the option; one made before (by hand, or an older cdcsync) is altered."""
    u = uid()
    table = f"part_{u}"
    execute(
        "postgres",
        f"CREATE TABLE {table} (id int PRIMARY KEY, v int, note text) PARTITION BY RANGE (id)",
        f"CREATE TABLE {table}_a PARTITION OF {table} FOR VALUES FROM (0) TO (1000)",
    )
    config = config_for(source_dict("postgres", f"pub{u}", [f"public.{table}"]))
    source = config.sources[0]
    try:
        execute("postgres", f"CREATE PUBLICATION {source.publication} FOR TABLE {table}")
        setup = plan(source)
        assert not setup.problems, setup.problems
        changed = carry_out(source, setup)
        assert any(f"publication {source.publication}" in line for line in changed), changed
        assert any(f"partition public.{table}_a" in line for line in changed), changed
        with pg_connect() as conn:
            row = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (source.publication,))
            assert row.fetchone() == (True,)
        assert not plan(source).statements  # applied twice: nothing more to change
    finally:
        execute("postgres", f"DROP PUBLICATION IF EXISTS {source.publication}", f"DROP TABLE IF EXISTS {table}")


def test_a_column_declared_multidimensional_is_refused_at_apply_naming_it() -> None:
    table = f"grid_{uid()}"
    execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY, cells int[][], tags text[])")
    config = config_for(source_dict("postgres", f"grid{uid()}", [f"public.{table}"]))
    try:
        with pytest.raises(PreflightError) as err:
            apply(config)
        assert f"table public.{table}: column cells is declared as a 2-dimensional array" in str(err.value)
        assert "tags" not in str(err.value)
        assert client_for(config).get_config(config.sources[0].name) is None
    finally:
        drop_capture(config)
        execute("postgres", f"DROP TABLE IF EXISTS {table}")


def test_a_table_at_risk_is_refused_when_apply_may_not_set_its_identity_and_nothing_is_changed() -> None:
    """``set_replica_identity: false``: apply names the table and the ALTER to run, and writes nothing anywhere."""
    u = uid()
    table = f"risk_{u}"
    execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY, body text)")
    config = config_for(source_dict("postgres", f"risk{u}", [f"public.{table}"], set_replica_identity=False))
    source = config.sources[0]
    try:
        with pytest.raises(PreflightError) as err:
            apply(config)
        assert f"table public.{table} has REPLICA IDENTITY DEFAULT" in str(err.value)
        assert f'ALTER TABLE "public"."{table}" REPLICA IDENTITY FULL' in str(err.value)
        assert _identity("public", table) == "d"
        with pg_connect() as conn:  # no signal table, no publication, no slot
            assert conn.execute("SELECT to_regclass(%s)", (str(source.signal_table),)).fetchone() == (None,)
            assert (
                conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (source.publication,)).fetchone()
                is None
            )
    finally:
        drop_capture(config)
        execute("postgres", f"DROP TABLE IF EXISTS {table}")


def test_nan_infinities_and_years_reach_every_store_as_the_database_holds_them(spark: Any, tmp_path: Path) -> None:
    """Values the databases accept that were dead-lettered: float NaN and ±Infinity, MariaDB YEAR."""
    u = uid()
    pg, ma = f"floats_{u}", f"years_{u}"
    ddl = {
        "postgres": [
            f"CREATE TABLE {pg} (id int PRIMARY KEY, d float8, r real, ds float8[])",
            f"INSERT INTO {pg} VALUES (1, 'NaN', 'Infinity', '{{1.5,2}}'), (2, '-Infinity', '-0', '{{-1}}'),"
            f" (3, 1e308, 3.25, NULL), (4, NULL, NULL, '{{}}')",
        ],
        "mariadb": [
            f"CREATE TABLE {ma} (id int PRIMARY KEY, y YEAR, d DOUBLE)",
            f"INSERT INTO {ma} VALUES (1, 2155, -0.0), (2, 1901, 1e308), (3, NULL, NULL)",
        ],
    }
    tables = {"postgres": [f"public.{pg}"], "mariadb": [f"inventory.{ma}"]}
    with scenario(spark, tmp_path, tables, ddl) as sc:
        sc.run_once()
        execute("postgres", f"UPDATE {pg} SET d = 'NaN', r = 'NaN' WHERE id = 3")
        execute("mariadb", f"UPDATE {ma} SET y = 2000 WHERE id = 3")
        sc.run_once()
        sc.assert_converged()
        es = sc.held("search", pg)
        assert (es["1"][1]["d"], es["1"][1]["r"], es["2"][1]["d"], es["3"][1]["d"]) == (
            "NaN",
            "Infinity",
            "-Infinity",
            "NaN",
        )
        assert es["1"][1]["ds"] == [1.5, 2.0]
        cache = sc.held("cache", pg)
        assert (cache["1"][1]["d"], cache["2"][1]["d"]) == ("nan", "-inf")
        warehouse = sc.held("warehouse", pg)
        assert str(warehouse["1"][1]["d"]) == "nan" and warehouse["2"][1]["d"] == float("-inf")
        for follower in FOLLOWERS:
            years = {k: doc.get("y") for k, (_, doc) in sc.held(follower, ma).items()}
            assert {k: None if y is None else int(y) for k, y in years.items()} == {"1": 2155, "2": 1901, "3": 2000}


def test_mariadb_times_past_a_day_or_below_zero_and_datetimes_of_each_precision_reach_every_store(
    spark: Any, tmp_path: Path
) -> None:
    """A MariaDB TIME runs from -838:59:59.999999 to 838:59:59.999999; past a day it once arrived as null.

    DATETIME(0) to (3) arrive as milliseconds, (4) to (6) as microseconds: one is a key column here, and a
    microsecond value near 1970 is one a guess by magnitude would read as milliseconds.
    """
    ma = f"times_{uid()}"
    ddl = {
        "mariadb": [
            f"CREATE TABLE {ma} (id int, at DATETIME(3), t TIME(6), t0 TIME, d DATE, dt0 DATETIME,"
            " dt6 DATETIME(6), PRIMARY KEY (id, at))",
            f"INSERT INTO {ma} VALUES (1, '2024-02-29 11:45:30.123', '838:59:59.999999', '-838:59:59',"
            " '1000-01-01', '1000-01-01 00:00:00', '9999-12-31 23:59:59.999999'),"
            " (2, '1969-12-31 23:59:59.999', '-00:00:00.5', '25:00:00', '9999-12-31', '1970-01-01 00:00:00',"
            " '1965-06-15 12:00:00.000001'), (3, '2000-01-01 00:00:00', '13:45:30.123456', '00:00:00', NULL, NULL,"
            " NULL)",
        ],
    }
    with scenario(spark, tmp_path, {"mariadb": [f"inventory.{ma}"]}, ddl) as sc:
        sc.run_once()
        execute("mariadb", f"UPDATE {ma} SET t = '-01:00:00', t0 = '100:00:00' WHERE id = 3")
        execute("mariadb", f"INSERT INTO {ma} VALUES (4, '1970-01-01 00:00:00.001', '00:00:00.000001', '-00:00:01',"
                " '1970-01-01', '2038-01-19 03:14:08', '1970-01-01 00:00:00.000001')")  # fmt: skip
        sc.run_once()
        sc.assert_converged()
        expected = {
            "1|2024-02-29T11:45:30.123000+00:00": ("838:59:59.999999", "-838:59:59"),
            "2|1969-12-31T23:59:59.999000+00:00": ("-00:00:00.500000", "25:00:00"),
            "3|2000-01-01T00:00:00+00:00": ("-01:00:00", "100:00:00"),
            "4|1970-01-01T00:00:00.001000+00:00": ("00:00:00.000001", "-00:00:01"),
        }
        for follower in FOLLOWERS:
            held = sc.held(follower, ma)
            assert {k: (doc["t"], doc["t0"]) for k, (_, doc) in held.items()} == expected, follower
        search = sc.docs("search", ma)
        first, second = search["1|2024-02-29T11:45:30.123000+00:00"], search["2|1969-12-31T23:59:59.999000+00:00"]
        assert (first["d"], first["dt0"], first["dt6"]) == (
            "1000-01-01",
            "1000-01-01T00:00:00+00:00",
            "9999-12-31T23:59:59.999999+00:00",
        )
        assert (second["d"], second["dt6"]) == ("9999-12-31", "1965-06-15T12:00:00.000001+00:00")


def test_names_with_spaces_dots_unicode_and_reserved_words_converge_in_every_store(spark: Any, tmp_path: Path) -> None:
    """Schema, table and column names a user may quote, on both databases; two tables whose topic names differ
    only where Debezium replaces characters Kafka refuses would collide, so the names here stay distinct."""
    u = uid()
    schema, table, db = f"Sales Dept.{u}", "Order Items ü", f"Shop Ö.{u}"
    pg, ma = f'"{schema}"."{table}"', f"`{db}`.`{table}`"
    columns = '"Order Id" int, "select" text, "Ünïcode col" text, "a.b" int, "MixedCase" int'
    ddl = {
        "postgres": [
            f'CREATE SCHEMA "{schema}"',
            f'CREATE TABLE {pg} ({columns}, PRIMARY KEY ("Order Id"))',
            f"INSERT INTO {pg} VALUES (1, 'x', 'ü', 1, 10), (2, 'y', NULL, 2, 20), (3, 'z', 'ß', 3, 30)",
        ],
        "mariadb": [
            f"CREATE DATABASE `{db}`",
            f"CREATE TABLE {ma} ({columns.replace(chr(34), '`')}, PRIMARY KEY (`Order Id`))",
            f"INSERT INTO {ma} VALUES (1, 'x', 'ü', 1, 10), (2, 'y', NULL, 2, 20), (3, 'z', 'ß', 3, 30)",
        ],
    }
    tables = {
        "postgres": [{"namespace": schema, "table": table}],
        "mariadb": [{"namespace": db, "table": table}],
    }
    mappings = {f"{db}.{table}": {"target": f"maria_{u}"}}  # the same table name in both databases
    try:
        with scenario(spark, tmp_path, tables, ddl, mappings=mappings) as sc:
            sc.run_once()
            execute(
                "postgres",
                f'UPDATE {pg} SET "select" = \'x2\', "a.b" = -1 WHERE "Order Id" = 1',
                f'DELETE FROM {pg} WHERE "Order Id" = 2',
                f"INSERT INTO {pg} VALUES (4, 'w', 'é', 4, 40)",
            )
            execute(
                "mariadb",
                f"UPDATE {ma} SET `select` = 'x2', `a.b` = -1 WHERE `Order Id` = 1",
                f"DELETE FROM {ma} WHERE `Order Id` = 2",
                f"INSERT INTO {ma} VALUES (4, 'w', 'é', 4, 40)",
            )
            sc.run_once()
            sc.assert_converged()
            assert default_target(table) == "order_items__"
            for follower in FOLLOWERS:
                for target in ("order_items__", f"maria_{u}"):
                    held = sc.docs(follower, target)
                    assert sorted(held) == ["1", "3", "4"], (follower, target, held)
                    first = held["1"]
                    assert (first["select"], first["Ünïcode col"], str(first["a.b"])) == ("x2", "ü", "-1"), first
    finally:
        execute("postgres", f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        execute("mariadb", f"DROP DATABASE IF EXISTS `{db}`")


def test_columns_elasticsearch_cannot_take_as_fields_are_refused_naming_them_and_converge_renamed(
    spark: Any, tmp_path: Path
) -> None:
    """ "a" beside "a.b" (Elasticsearch reads the dot as a path) and a metadata name like "_id": every document
    of the table was dead-lettered. The search follower now holds the table, naming each column and the
    rename to set; with it, every store converges."""
    from cdcsync.sync import held

    t = f"fields_{uid()}"
    ddl = {"postgres": [
        f'CREATE TABLE {t} (id int PRIMARY KEY, a int, "a.b" int, "_id" text)',
        f"INSERT INTO {t} VALUES (1, 1, 10, 'x'), (2, 2, NULL, NULL)",
    ]}  # fmt: skip
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
        sc.run_once("search")
        [refused] = held.holding(sc.config, "search").values()  # held alone, no document dead-lettered
        assert f"table public.{t}: column 'a' as field 'a' is also the object holding field 'a.b'" in refused["reason"]
        assert "column '_id' as field '_id' is one of Elasticsearch's metadata fields" in refused["reason"]
        assert f"mappings.'public.{t}'.rename" in refused["fix"]
    mappings = {f"public.{t}": {"rename": {"a": "a_value", "_id": "source_id"}}}
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl, mappings=mappings) as sc:
        sc.run_once()
        execute("postgres", f'UPDATE {t} SET "a.b" = 20, "_id" = \'y\' WHERE id = 2')
        sc.run_once()
        sc.assert_converged()
        docs = sc.docs("search", t)
        assert (docs["2"]["a_value"], docs["2"]["a.b"], docs["2"]["source_id"]) == (2, 20, "y")


def test_money_text_search_geometric_and_composite_values_reach_every_store_as_postgres_writes_them(
    spark: Any, tmp_path: Path
) -> None:
    """Columns Debezium once left out of every change (box, tsquery, a composite...) and money, which verify
    read as '$12.34' against the stores' 12.34."""
    u = uid()
    t = f"shapes_{u}"
    ddl = {
        "postgres": [
            f"CREATE TYPE pair_{u} AS (a int, b text)",
            f"CREATE TABLE {t} (id int PRIMARY KEY, m money, tv tsvector, tq tsquery, bx box, ci circle, ln line,"
            f" ls lseg, pa path, po polygon, lsn pg_lsn, pr pair_{u})",
            f"INSERT INTO {t} VALUES (1, '-92233720368547758.08', 'a fat cat', 'fat & !rat', '((0,0),(1,1))',"
            " '<(1,1),2>', '{1,-1,0}', '[(0,0),(1,1)]', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(2,0))', '16/B374D848',"
            " ROW(1, 'x \"y\"')), (2, 12.34, '', 'a', NULL, NULL, NULL, NULL, NULL, NULL, NULL, ROW(NULL, NULL)),"
            " (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        ]
    }
    try:
        with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
            sc.run_once()
            execute("postgres", f"UPDATE {t} SET m = 92233720368547758.07, bx = '((2,2),(3,3))', pr = ROW(2, NULL)"
                    " WHERE id = 2", f"UPDATE {t} SET tv = 'b' WHERE id = 1")  # fmt: skip
            sc.run_once()
            sc.assert_converged()
            for follower in FOLLOWERS:
                held = sc.docs(follower, t)
                first, second = held["1"], held["2"]
                assert (first["bx"], first["ci"], first["ln"], first["lsn"]) == (
                    "(1.0,1.0),(0.0,0.0)",
                    "<(1.0,1.0),2.0>",
                    "{1.0,-1.0,0.0}",
                    "16/B374D848",
                ), follower
                assert (first["tv"], first["tq"], first["pr"]) == ("'b'", "'fat' & !'rat'", '(1,"x ""y""")'), follower
                assert (second["bx"], second["pr"], str(second["m"])) == (
                    "(3.0,3.0),(2.0,2.0)",
                    "(2,)",
                    "92233720368547758.07",
                )
                assert str(first["m"]) == "-92233720368547758.08", follower
    finally:
        execute("postgres", f"DROP TABLE IF EXISTS {t}", f"DROP TYPE IF EXISTS pair_{u}")


def test_a_copy_from_the_source_reads_money_geometric_and_composite_values_as_capture_sends_them(
    spark: Any, tmp_path: Path
) -> None:
    """``bootstrap --from source`` reads these through Spark's JDBC reader, then the stream changes them."""
    u = uid()
    t = f"copied_{u}"
    ddl = {
        "postgres": [
            f"CREATE TYPE duo_{u} AS (a int, b text)",
            f"CREATE TABLE {t} (id int PRIMARY KEY, m money, bx box, pr duo_{u}, tq tsquery, ma TIME)",
            f"INSERT INTO {t} VALUES (1, '-1234.5', '((0,0),(1.5,1e20))', ROW(1, 'x'), 'a & b', '13:45:30'),"
            " (2, NULL, NULL, NULL, NULL, NULL), (3, '92233720368547758.07', NULL, NULL, NULL, NULL)",
        ]
    }
    try:
        with scenario(
            spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl, source_options={"snapshot_mode": "no_data"}
        ) as sc:
            sc.bootstrap_from_source()
            sc.assert_converged()
            execute("postgres", f"UPDATE {t} SET m = 7, bx = '((2,2),(3,3))' WHERE id = 2")
            sc.run_once()
            sc.assert_converged()
            for follower in FOLLOWERS:
                held = sc.docs(follower, t)
                first, third = held["1"], held["3"]
                assert (Decimal(str(first["m"])), first["bx"], first["pr"]) == (
                    Decimal("-1234.5"),
                    "(1.5,1e+20),(0.0,0.0)",
                    "(1,x)",
                ), follower
                assert Decimal(str(third["m"])) == Decimal("92233720368547758.07"), follower
    finally:
        execute("postgres", f"DROP TABLE IF EXISTS {t}", f"DROP TYPE IF EXISTS duo_{u}")


WIDE_NUMERIC = "-" + "9" * 60 + "." + "0123456789" * 4  # no DECIMAL(38) holds it
WIDEST_DECIMAL = "9" * 35 + "." + "9" * 30  # MariaDB's DECIMAL(65,30) at its largest


def digits(value: Any) -> str:
    """A decimal as a store's client gives it (text, Decimal, float-free) -> its digits, one text per value."""
    return "None" if value is None else decimal_text(Decimal(str(value)))


def test_infinite_timestamps_numeric_infinities_and_unsigned_bigints_reach_the_stores(
    spark: Any, tmp_path: Path
) -> None:
    """Postgres 'infinity' (timestamp, timestamptz, date, numeric) and MariaDB BIGINT UNSIGNED up to 2^64 - 1.

    The timestamps and dates are the latest and earliest values each store holds; ``verify`` reads the
    source's infinities the same way instead of ending in a traceback. A numeric infinity or NaN, and
    decimals wider than any DECIMAL(38), reach every store: the warehouse holds the exact digits as text
    where the source's column type does not bound them (docs/types.md).
    """
    u = uid()
    pg, num, ma = f"far_{u}", f"num_{u}", f"unsigned_{u}"
    ddl = {
        "postgres": [
            f"CREATE TABLE {pg} (id int PRIMARY KEY, ts timestamp, tz timestamptz, d date)",
            f"INSERT INTO {pg} VALUES (1, 'infinity', 'infinity', 'infinity'),"
            f" (2, '-infinity', '-infinity', '-infinity'), (3, '2024-02-29 12:00', '2024-02-29 12:00Z', '2024-02-29')",
            f"CREATE TABLE {num} (id int PRIMARY KEY, n numeric, c numeric(12,2))",
            f"INSERT INTO {num} VALUES (1, 'Infinity', 'NaN'), (2, '-Infinity', -0.5), (3, 'NaN', NULL),"
            f" (4, 12.50, 9999999999.99), (5, {WIDE_NUMERIC}, 0)",
        ],
        "mariadb": [
            f"CREATE TABLE {ma} (id BIGINT UNSIGNED PRIMARY KEY, n BIGINT UNSIGNED, s BIGINT, d DECIMAL(65,30))",
            f"INSERT INTO {ma} VALUES (18446744073709551615, 18446744073709551615, -9223372036854775808,"
            f" {WIDEST_DECIMAL}), (1, 9223372036854775808, 9223372036854775807, -0.000000000000000000000000000001)",
        ],
    }
    tables = {"postgres": [f"public.{pg}", f"public.{num}"], "mariadb": [f"inventory.{ma}"]}
    with scenario(spark, tmp_path, tables, ddl) as sc:
        sc.run_once()
        execute("postgres", f"UPDATE {pg} SET ts = 'infinity' WHERE id = 3", f"UPDATE {num} SET n = 'NaN' WHERE id = 4")
        execute("mariadb", f"UPDATE {ma} SET n = n - 1 WHERE id = 1")
        sc.run_once()
        bad = [r.as_dict() for r in sc.verify() if not r.clean]
        assert not bad, json.dumps(bad)
        for follower in FOLLOWERS:
            held = sc.held(follower, pg)
            assert str(held["1"][1]["ts"]).startswith("9999-12-31") and str(held["2"][1]["d"]).startswith("0001-01-01")
            assert str(held["3"][1]["ts"]).startswith("9999-12-31"), follower
            unsigned = {k: int(doc["n"]) for k, (_, doc) in sc.held(follower, ma).items()}
            assert unsigned == {"18446744073709551615": 2**64 - 1, "1": 2**63 - 1}, follower
            numbers = {k: (digits(doc["n"]), digits(doc.get("c"))) for k, (_, doc) in sc.held(follower, num).items()}
            assert numbers == {
                "1": ("Infinity", "NaN"), "2": ("-Infinity", "-0.5"), "3": ("NaN", "None"),
                "4": ("NaN", "9999999999.99"), "5": (WIDE_NUMERIC, "0"),
            }, follower  # fmt: skip
            widest = {k: Decimal(str(doc["d"])) for k, (_, doc) in sc.held(follower, ma).items()}
            assert widest == {"18446744073709551615": Decimal(WIDEST_DECIMAL), "1": Decimal("-1E-30")}, follower
        lake = sc.config.follower("warehouse").path
        schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(f"{lake}/{num}").schema}
        assert (schema["n"], schema["c"]) == ("string", "string")  # a Postgres numeric(12,2) holds NaN too
        schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(f"{lake}/{ma}").schema}
        assert (schema["n"], schema["d"]) == ("decimal(20,0)", "string")


def iso(value: Any) -> str:
    """A date or timestamp as a store's client gives it (ISO text, a date, a datetime) -> ISO text."""
    return value if isinstance(value, str) else value.isoformat()


FAR_ROWS = {  # id -> (date, timestamp, timestamptz) as Postgres takes them
    1: ("10000-01-01", "4713-01-01 00:00:00 BC", "294247-01-01 00:00:00+00"),
    2: ("0044-03-15 BC", "0001-01-01 00:00:00.5 BC", "12345-06-07 08:09:10.123+00"),
}
FAR_HELD = {  # ... and as every store holds them: ISO 8601's expanded years, in UTC (docs/types.md)
    "1": ("+10000-01-01", "-4712-01-01T00:00:00+00:00", "+294247-01-01T00:00:00+00:00"),
    "2": ("-0043-03-15", "0000-01-01T00:00:00.500000+00:00", "+12345-06-07T08:09:10.123000+00:00"),
}
FAR_KEYS = ["4713-01-01 00:00:00+00 BC", "20000-01-01 00:00:00+00", "2024-01-01 00:00:00+00"]
FAR_IDS = {"-4712-01-01T00:00:00+00:00", "+20000-01-01T00:00:00+00:00", "2024-01-01T00:00:00+00:00"}


def far_tables(u: str, rows: list[int]) -> tuple[str, str, list[str]]:
    t, keyed = f"far_dates_{u}", f"far_keys_{u}"
    values = ", ".join(f"({i}, '{d}', '{ts}', '{tz}')" for i, (d, ts, tz) in FAR_ROWS.items() if i in rows)
    ddl = [f"CREATE TABLE {t} (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz)",
           f"CREATE TABLE {keyed} (k timestamptz PRIMARY KEY, v int)"]  # fmt: skip
    return t, keyed, ddl + ([f"INSERT INTO {t} VALUES {values}"] if values else [])


def assert_far_values_held(sc: Any, t: str, keyed: str) -> None:
    for follower in FOLLOWERS:
        held = {k: (iso(doc["d"]), iso(doc["ts"]), iso(doc["tz"])) for k, doc in sc.docs(follower, t).items()}
        assert held == FAR_HELD, follower
        assert set(sc.docs(follower, keyed)) == FAR_IDS, follower


def test_dates_and_timestamps_before_year_1_and_after_9999_reach_every_store_exactly(
    spark: Any, tmp_path: Path
) -> None:
    """BC and five-digit years: dead-lettered in every store before; now ISO 8601's expanded form everywhere.

    The BC date is written after the initial snapshot, as a streamed change; a snapshot's BC date (sent without
    its era, read again from the source) is tests/integration/test_verify_edges.py's.
    """
    t, keyed, ddl = far_tables(uid(), [1])
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}", f"public.{keyed}"]}, {"postgres": ddl}) as sc:
        sc.run_once()
        d, ts, tz = FAR_ROWS[2]
        keys = ", ".join(f"('{k}', 1)" for k in [*FAR_KEYS, "30000-01-01 00:00:00+00"])
        execute(
            "postgres",
            f"INSERT INTO {t} VALUES (2, '{d}', '{ts}', '{tz}')",
            f"INSERT INTO {keyed} VALUES {keys}",
            f"UPDATE {keyed} SET v = 2 WHERE k < '0001-01-01 00:00:00+00'",
            f"DELETE FROM {keyed} WHERE k = '30000-01-01 00:00:00+00'",
        )
        sc.run_once()
        sc.assert_converged()
        assert_far_values_held(sc, t, keyed)


def test_a_copy_from_the_source_reads_dates_before_year_1_and_after_9999_as_capture_sends_them(
    spark: Any, tmp_path: Path
) -> None:
    t, keyed, ddl = far_tables(uid(), [1, 2])
    ddl.append(f"INSERT INTO {keyed} VALUES " + ", ".join(f"('{k}', 1)" for k in FAR_KEYS))
    tables = {"postgres": [f"public.{t}", f"public.{keyed}"]}
    with scenario(spark, tmp_path, tables, {"postgres": ddl}, source_options={"snapshot_mode": "no_data"}) as sc:
        sc.bootstrap_from_source()
        sc.assert_converged()
        assert_far_values_held(sc, t, keyed)


BIT_DDL = {  # bit(1), bit(n) with leading zeros, a varbit; MariaDB's BIT(1), BIT(12) and BIT(64)
    "postgres": [
        "CREATE TABLE {t} (id int PRIMARY KEY, b1 bit, b3 bit(3), b12 bit(12), vb varbit(20))",
        "INSERT INTO {t} VALUES (1, B'1', B'000', B'000000000011', B'1000000001'), (2, B'0', B'101', NULL, B'1'),"
        " (3, NULL, NULL, B'100000000001', NULL)",
    ],
    "mariadb": [
        "CREATE TABLE {t} (id int PRIMARY KEY, b1 BIT(1), b12 BIT(12), b64 BIT(64))",
        "INSERT INTO {t} VALUES (1, b'1', b'000000000011', b'0'), (2, b'0', NULL, 18446744073709551615),"
        " (3, NULL, b'100000000001', NULL)",
    ],
}
BITS_HELD = {
    "postgres": {
        "1": {"b1": "1", "b3": "000", "b12": "000000000011", "vb": "1000000001"},
        "2": {"b1": "0", "b3": "101", "vb": "1"},
        "3": {"b12": "100000000001"},
    },
    "mariadb": {
        "1": {"b1": "1", "b12": "000000000011", "b64": "0" * 64},
        "2": {"b1": "0", "b64": "1" * 64},
        "3": {"b12": "100000000001"},
    },
}


@pytest.mark.parametrize("origin", ["topics", "source"])
def test_bit_strings_reach_every_store_as_the_database_writes_them(spark: Any, tmp_path: Path, origin: str) -> None:
    """Debezium sends a bit string's bytes with its leading zeros dropped: B'000' arrived empty, B'101' as base64."""
    u = uid()
    t = {"postgres": f"bits_{u}", "mariadb": f"mbits_{u}"}
    ddl = {kind: [line.format(t=t[kind]) for line in lines] for kind, lines in BIT_DDL.items()}
    tables = {"postgres": [f"public.{t['postgres']}"], "mariadb": [f"inventory.{t['mariadb']}"]}
    options = {"snapshot_mode": "no_data"} if origin == "source" else {}
    with scenario(spark, tmp_path, tables, ddl, source_options=options) as sc:
        if origin == "source":
            sc.bootstrap_from_source()
        else:
            sc.run_once()
        execute("postgres", f"UPDATE {t['postgres']} SET b3 = B'010', vb = B'11' WHERE id = 2")
        execute("mariadb", f"UPDATE {t['mariadb']} SET b12 = b'000000000001' WHERE id = 2")
        sc.run_once()
        sc.assert_converged()
        expected = {kind: {k: dict(doc) for k, doc in held.items()} for kind, held in BITS_HELD.items()}
        expected["postgres"]["2"].update(b3="010", vb="11")
        expected["mariadb"]["2"]["b12"] = "000000000001"
        for follower in FOLLOWERS:
            for kind, table in t.items():
                docs = sc.docs(follower, table).items()  # Elasticsearch keeps a null as null: left out here
                held = {k: {c: v for c, v in doc.items() if c != "id" and v is not None} for k, doc in docs}
                assert held == expected[kind], (follower, kind)


def test_a_json_column_holding_objects_arrays_scalars_and_null_reaches_every_store(spark: Any, tmp_path: Path) -> None:
    """One column, every shape of JSON value in different rows: Elasticsearch refused all but the first shape."""
    u = uid()
    pg, ma = f"shapes_{u}", f"mshapes_{u}"
    values = ['{"a": {"b": [1, 2]}}', '"text"', "42", '[1, "x", null]', "null", '{"a": "now a string"}', "true"]
    ddl = {
        "postgres": [
            f"CREATE TABLE {pg} (id int PRIMARY KEY, j jsonb, k json)",
            *(f"INSERT INTO {pg} VALUES ({i}, '{v}', '{v}')" for i, v in enumerate(values)),
        ],
        "mariadb": [
            f"CREATE TABLE {ma} (id int PRIMARY KEY, j JSON)",
            *(f"INSERT INTO {ma} VALUES ({i}, '{v}')" for i, v in enumerate(values)),
        ],
    }
    tables = {"postgres": [f"public.{pg}"], "mariadb": [f"inventory.{ma}"]}
    with scenario(spark, tmp_path, tables, ddl) as sc:
        sc.run_once()
        execute("postgres", f"UPDATE {pg} SET j = '[]' WHERE id = 0", f"UPDATE {pg} SET k = '{{}}' WHERE id = 1")
        execute("mariadb", f"UPDATE {ma} SET j = '\"swapped\"' WHERE id = 0")
        sc.run_once()
        sc.assert_converged()
        docs = sc.docs("search", pg)  # _source, through Elasticsearch's client
        assert [docs[str(i)]["j"] for i in range(len(values))] == [
            [],
            "text",
            42,
            [1, "x", None],
            None,
            {"a": "now a string"},
            True,
        ]
        assert docs["1"]["k"] == {}


def test_points_and_spatial_values_reach_every_store_as_debeziums_struct(spark: Any, tmp_path: Path) -> None:
    """Postgres point, MariaDB POINT and GEOMETRY: dead-lettered by Elasticsearch and Delta before."""
    u = uid()
    pg, ma = f"points_{u}", f"spatial_{u}"
    ddl = {
        "postgres": [
            f"CREATE TABLE {pg} (id int PRIMARY KEY, p point)",
            f"INSERT INTO {pg} VALUES (1, '(1.5,2)'), (2, '(-1,-2)'), (3, NULL)",
        ],
        "mariadb": [
            f"CREATE TABLE {ma} (id int PRIMARY KEY, p POINT, g GEOMETRY)",
            f"INSERT INTO {ma} VALUES (1, POINT(1.5, 2), ST_GeomFromText('LINESTRING(0 0, 1 1)')),"
            " (2, ST_GeomFromText('POINT(3 4)', 4326), NULL)",
        ],
    }
    tables = {"postgres": [f"public.{pg}"], "mariadb": [f"inventory.{ma}"]}
    with scenario(spark, tmp_path, tables, ddl) as sc:
        sc.run_once()
        execute("postgres", f"UPDATE {pg} SET p = '(7,8)' WHERE id = 2")
        execute("mariadb", f"UPDATE {ma} SET g = POINT(5, 6) WHERE id = 2")
        sc.run_once()
        sc.assert_converged()
        for follower in FOLLOWERS:
            points = {k: doc.get("p") for k, (_, doc) in sc.held(follower, pg).items()}
            parsed = {k: (json.loads(v) if isinstance(v, str) else v) for k, v in points.items()}
            assert {k: v and (v["x"], v["y"]) for k, v in parsed.items()} == {
                "1": (1.5, 2.0),
                "2": (7.0, 8.0),
                "3": None,
            }, follower
            spatial = sc.docs(follower, ma)
            g = spatial["1"]["g"]
            assert (json.loads(g) if isinstance(g, str) else g)["wkb"].startswith("AQIAAAAC"), follower  # LINESTRING


def test_intervals_network_addresses_ranges_and_xml_converge_and_verify_reads_them(spark: Any, tmp_path: Path) -> None:
    """Types Debezium sends as text: verify read them as Python objects and ended in a traceback (interval)."""
    u = uid()
    t = f"texts_{u}"
    ddl = {
        "postgres": [
            f"CREATE TABLE {t} (id int PRIMARY KEY, iv interval, i inet, c cidr, m macaddr, r int4range,"
            " tr tstzrange, dr daterange, x xml)",
            f"INSERT INTO {t} VALUES (1, '1 year 2 mons 3 days 04:05:06.7', '192.168.0.1', '10.0.0.0/8',"
            " '08:00:2b:01:02:03', '[1,5)', '[2024-01-01 10:00+00,2024-01-02 00:00+00)', '[2024-01-01,2024-02-01)',"
            " '<a>x</a>'),"
            f" (2, '-1 day', '::1', '2001:db8::/32', NULL, 'empty', '(,)', NULL, NULL),"
            f" (3, '2 weeks -00:00:01', NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        ],
    }
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, ddl) as sc:
        sc.run_once()
        execute("postgres", f"UPDATE {t} SET iv = iv + interval '1 mon', i = '10.1.2.3/16' WHERE id = 1")
        sc.run_once()
        sc.assert_converged()
        for follower in FOLLOWERS:
            held = sc.docs(follower, t)
            assert held["1"]["iv"] == "P1Y3M3DT4H5M6.7S" and held["3"]["iv"] == "P0Y0M14DT0H0M-1S", follower
            assert (held["1"]["i"], held["2"]["c"], held["2"]["r"]) == ("10.1.2.3/16", "2001:db8::/32", "empty")


def test_setting_the_identity_behind_a_long_transaction_gives_up_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ALTER's lock would queue behind a long transaction and block every query of the table meanwhile."""
    from cdcsync.errors import RetryableError
    from cdcsync.sources.postgres import capture as postgres_capture

    u = uid()
    table = f"busy_{u}"
    execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY, body text)")
    source = config_for(source_dict("postgres", f"busy{u}", [f"public.{table}"])).sources[0]
    monkeypatch.setattr(postgres_capture, "LOCK_TIMEOUT_S", 1)
    reader = pg_connect(autocommit=False)
    try:
        reader.execute(f"SELECT count(*) FROM {table}")  # an open transaction holding ACCESS SHARE
        setup = plan(source)
        assert len(setup.statements) == 1
        started = time.monotonic()
        with pytest.raises(RetryableError, match=f"waited 1 s for its lock.*table public.{table}"):
            carry_out(source, setup)
        assert time.monotonic() - started < 10
        reader.rollback()
        assert _identity("public", table) == "d"
        assert carry_out(source, plan(source)) and _identity("public", table) == "f"
    finally:
        reader.close()
        execute("postgres", f"DROP TABLE IF EXISTS {table}")


@contextmanager
def _maria_database(*ddl: str) -> Iterator[str]:
    """A database of its own: a DDL Debezium cannot parse stops every connector that reads it, so not inventory."""
    db = f"inet_{uid()}"
    conn = maria_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            for statement in ddl:
                cur.execute(statement.format(db=db))
        yield db
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.close()


def test_a_mariadb_type_debeziums_parser_cannot_read_is_refused_at_apply_even_in_a_table_not_captured() -> None:
    with _maria_database(
        "CREATE TABLE {db}.ok (id int PRIMARY KEY, v int)",
        "CREATE TABLE {db}.hosts (id int PRIMARY KEY, addr INET6, v4 INET4)",
    ) as db:
        config = config_for(source_dict("mariadb", f"inet{uid()}", [f"{db}.ok"], database=db))
        try:
            with pytest.raises(PreflightError) as err:
                apply(config)
            message = str(err.value)
            assert f"table {db}.hosts, which is not captured but lives in captured database {db}" in message
            assert "column addr is INET6" in message and "column v4 is INET4" in message
            assert client_for(config).get_config(config.sources[0].name) is None  # nothing registered
        finally:
            drop_capture(config)


def test_a_table_debezium_cannot_parse_made_while_streaming_leaves_capture_running_unless_it_is_captured() -> None:
    """Against the real Connect: a table outside the capture list with an INET6 column once stopped capture of
    its whole database, in a restart loop. Now its DDL is skipped and capture goes on; an ALTER that gives a
    captured table such a column stops capture loudly, with the fix named, and the watchdog does not restart it.
    """
    with _maria_database("CREATE TABLE {db}.ok (id int PRIMARY KEY, v int)") as db:
        config = config_for(source_dict("mariadb", f"inet{uid()}", [f"{db}.ok"], database=db))
        source = config.sources[0]
        client = client_for(config)
        try:
            apply(config)
            wait_streaming(config)
            with maria_connect().cursor() as cur:
                cur.execute(f"CREATE TABLE {db}.hosts (id int PRIMARY KEY, addr INET6, v4 INET4)")
                cur.execute(f"INSERT INTO {db}.hosts VALUES (1, '::1', '10.0.0.1')")
                cur.execute(f"INSERT INTO {db}.ok VALUES (1, 10)")
            records = read_topic(source.topic(config.sources[0].tables[0]), lambda rs: any(r.value for r in rs))
            assert [r.value["after"] for r in records if r.value] == [{"id": 1, "v": 10}]
            assert all(t["state"] == "RUNNING" for t in client.status(source.name)["tasks"])
            assert apply(config)[0].action in ("unchanged", "updated")  # an existing connector: not refused

            with maria_connect().cursor() as cur:
                cur.execute(f"ALTER TABLE {db}.ok ADD COLUMN addr INET6")
            deadline = time.monotonic() + 90
            while not any(t["state"] == "FAILED" for t in (client.status(source.name) or {}).get("tasks", [])):
                assert time.monotonic() < deadline, client.status(source.name)
                time.sleep(1)
            watch = CaptureWatch(config)
            restarts = metrics.CAPTURE_HEALS.labels(source.name, "restart_failed")._value.get()
            watch.tick()
            healthy, problems = watch.health()
            assert not healthy and "FAILED, not restarted" in problems[0], problems
            assert f"table {db}.ok, column addr of type inet6" in problems[0]
            assert metrics.CAPTURE_HEALS.labels(source.name, "restart_failed")._value.get() == restarts
            assert metrics.CAPTURE_UNRECOVERABLE.labels(source.name)._value.get() == 1
        finally:
            drop_capture(config)
