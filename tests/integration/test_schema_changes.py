"""Schema changes while streaming, and the sinks' natural types (docs/schema-changes.md).

ADD COLUMN of several common types on Postgres and MariaDB, then rows
written with them, with all three followers running: each sink must get
each new column with its natural type from its first row on (Delta: a
typed column, not text; Elasticsearch: an explicit field mapping, not a
dynamic guess), without a restart. A restart after it must not refuse the
table, and every store must equal the source.

Decimals in Elasticsearch are numbers: a range query and a sort on the
field return what the same SQL returns, and ``<field>.exact`` matches the
exact digits.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from tests.integration.followers import numbered_table, scenario
from tests.support import ENV, execute, maria_connect, pg_connect, uid

ROWS = 20
# column -> (Postgres type, MariaDB type, Delta type from Postgres, from MariaDB, Elasticsearch field type);
# a Postgres numeric may hold NaN, so the warehouse keeps its exact text (docs/types.md)
ADDED = {
    "b": ("int", "int", "bigint", "bigint", "long"),
    "price": ("numeric(10,2)", "decimal(10,2)", "string", "decimal(10,2)", "double"),
    "born": ("date", "date", "date", "date", "date"),
    "note": ("text", "text", "string", "string", None),
}


# `make test` plays these on Postgres, `make chaos` on both (`make test` stays within its hour on CI's
# machines, ~1.3x slower than ours); the MariaDB DDL path still runs in `make test` through the
# added columns and the decimal range query, left on both.
MARIADB_LONG = ["postgres", pytest.param("mariadb", marks=pytest.mark.long)]


def table_of(kind: str, t: str, columns: str, values: str, rows: int = ROWS) -> dict[str, list[str]]:
    """DDL for ``scenario``: ``t (columns)`` holding ids 1..rows, the other columns ``values`` of each id ``n``."""
    ids = f"generate_series(1, {rows}) AS g(n)" if kind == "postgres" else f"(SELECT seq AS n FROM seq_1_to_{rows}) g"
    return {kind: [f"CREATE TABLE {t} ({columns})", f"INSERT INTO {t} SELECT n, {values} FROM {ids}"]}


@contextmanager
def polled(sc: Any, target: str) -> Iterator[dict[str, list[int]]]:
    """A reader thread counting the rows each follower's store shows for ``target`` until the block ends."""
    import threading

    seen: dict[str, list[int]] = {name: [] for name in sc.followers}
    stop, errors = threading.Event(), []

    def loop() -> None:
        while not stop.is_set():
            for name in seen:
                try:
                    seen[name].append(len(sc.held(name, target)))
                except Exception as err:  # a reader error is what the rebuild must not cause
                    errors.append(f"{name}: {err}")
            time.sleep(0.2)

    reader = threading.Thread(target=loop)
    reader.start()
    try:
        yield seen
    finally:
        stop.set()
        reader.join()
    assert not errors, errors[:5]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-schema-tests")
    yield session
    session.stop()


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_added_columns_arrive_typed_in_every_sink_without_a_restart(spark: Any, tmp_path: Path, kind: str) -> None:
    t = f"shape_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, numbered_table(t, ROWS, kind)) as sc:
        sc.run_once()
        execute(kind, *(f"ALTER TABLE {t} ADD COLUMN {c} {types[0 if kind == 'postgres' else 1]}"
                        for c, types in ADDED.items()))  # fmt: skip
        born = "DATE '2020-01-01' + id" if kind == "postgres" else "DATE_ADD('2020-01-01', INTERVAL id DAY)"
        execute(kind, f"UPDATE {t} SET b = id * 10, price = id + 0.25, born = {born}, note = 'n' WHERE id <= 10")
        execute(kind, f"INSERT INTO {t} VALUES (100, 100, 7, 12.5, '2021-02-03', 'new')")
        sc.run_once()  # the followers built before the ALTER meet the new columns

        target = sc.followers["warehouse"].mappings[next(iter(sc.followers["warehouse"].mappings))].target
        delta = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(
            f"{sc.config.follower('warehouse').path}/{target}").schema.fields}  # fmt: skip
        wanted = {c: types[2 if kind == "postgres" else 3] for c, types in ADDED.items()}
        assert {c: delta.get(c) for c in ADDED} == wanted, delta
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        fields = next(iter(es.indices.get_mapping(index=f"{sc.tag}-{target}").values()))["mappings"]["properties"]
        for column, types in ADDED.items():
            if types[4] is not None:
                assert fields.get(column, {}).get("type") == types[4], (column, fields.get(column))
        sc.assert_converged()

        # A restart reads the catalog afresh: the columns it finds must fit what the sinks made of them.
        sc.followers.clear()
        execute(kind, f"UPDATE {t} SET b = b + 1, price = price * 2 WHERE id <= 5")
        sc.run_once()
        sc.assert_converged()
        held = sc.held("warehouse", target)
        assert held["100"][1]["b"] == 7 and str(held["100"][1]["price"]).startswith("12.5"), held["100"]


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_range_query_on_a_decimal_in_elasticsearch_returns_the_rows_sql_returns(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    t = f"price_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    # Distinct prices from -200 to ~800 with two decimals (37 and 1000 are coprime: no two ids share one).
    price = "CAST(n * 37 % 1000 AS DECIMAL(12,2)) - 200 + n / 100.0"  # MariaDB's seq is unsigned: no negatives
    ddl = table_of(kind, t, "id INT PRIMARY KEY, price DECIMAL(12,2)", price, rows=60)
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, ddl) as sc:
        nan = []
        if kind == "postgres":  # numeric's NaN: no number to index; the document and its exact text stay
            execute(kind, f"INSERT INTO {t} VALUES (61, 'NaN')")
            nan = [61]
        sc.run_once("search")
        sc.assert_converged("search")

        target = sc.followers["search"].mappings[next(iter(sc.followers["search"].mappings))].target
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        index = f"{sc.tag}-{target}"

        def es_ids(query: dict[str, Any], sort: list[Any] | None = None, size: int = 100) -> list[int]:
            found = es.search(index=index, query=query, sort=sort, size=size, source=False)
            return [int(hit["_id"]) for hit in found["hits"]["hits"]]

        def sql_ids(where: str, order: str = "id") -> list[int]:
            conn = pg_connect() if kind == "postgres" else maria_connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT id FROM {t} WHERE {where} ORDER BY {order}")
                    return [row[0] for row in cur.fetchall()]
            finally:
                conn.close()

        in_range = es_ids({"range": {"price": {"gte": 10.5, "lte": 500}}}, sort=[{"id": "asc"}])
        assert in_range == sql_ids("price BETWEEN 10.5 AND 500") and len(in_range) > 10, in_range
        numbers = "id NOT IN (61)" if nan else "1 = 1"
        top = es_ids({"match_all": {}}, sort=[{"price": "desc"}], size=10)
        assert top == sql_ids(numbers, order="price DESC")[:10], top
        assert es_ids({"term": {"price.exact": "-162.99"}}) == [1]  # 37 - 200 + 0.01: the exact digits
        if nan:
            assert es_ids({"term": {"price.exact": "NaN"}}) == nan
        mapping = next(iter(es.indices.get_mapping(index=index).values()))["mappings"]["properties"]["price"]
        assert mapping["type"] == "double" and mapping["fields"]["exact"]["type"] == "keyword", mapping


@pytest.mark.parametrize("kind", MARIADB_LONG)
def test_a_dropped_column_leaves_every_row_of_every_sink_online(spark: Any, tmp_path: Path, kind: str) -> None:
    """DROP COLUMN, then changes to a few rows only: the field must go from the rows nobody touched too."""
    t = f"drop_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    ddl = table_of(kind, t, "id INT PRIMARY KEY, v INT NOT NULL, gone TEXT, price DECIMAL(10,2)",
                   "n, CONCAT('g', n), n + 0.5")  # fmt: skip
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, ddl) as sc:
        sc.run_once()
        sc.assert_converged()
        execute(kind, f"ALTER TABLE {t} DROP COLUMN gone", f"UPDATE {t} SET v = v + 100 WHERE id <= 3")
        sc.run_once()  # the followers built before the DROP meet changes without the column
        sc.assert_converged()
        target = sc.followers["warehouse"].mappings[next(iter(sc.followers["warehouse"].mappings))].target
        for name in ("search", "cache", "warehouse"):
            kept = {i: doc["gone"] for i, (_, doc) in sc.held(name, target).items() if doc.get("gone") is not None}
            assert not kept, (name, kept)
        columns = spark.read.format("delta").load(f"{sc.config.follower('warehouse').path}/{target}").columns
        assert "gone" not in columns and "price" in columns, columns

        # A restart reads the catalog without the column; more changes, and the stores still equal the source.
        sc.followers.clear()
        execute(kind, f"UPDATE {t} SET price = price * 2 WHERE id > 15", f"DELETE FROM {t} WHERE id = 4")
        sc.run_once()
        sc.assert_converged()


@pytest.mark.parametrize("kind", MARIADB_LONG)
def test_a_rename_is_named_for_a_rebuild_from_the_source_and_that_rebuild_converges(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    """RENAME COLUMN plus a column added with a DEFAULT: rows nobody touches since hold the old shape everywhere.

    No change event will fix them, and the topics hold them in the old shape
    too: each follower records the table (``sync.reindex_needed``), verify is not
    clean, and ``reindex --table T --from source`` makes every store equal
    the source and clears the record.
    """
    from cdcsync.snapshot.reindex import reindex
    from cdcsync.sync import reindex_needed

    t = f"ren_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    ddl = table_of(kind, t, "id INT PRIMARY KEY, v INT NOT NULL, note TEXT", "n, CONCAT('n', n)")
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, ddl) as sc:
        sc.run_once()
        sc.assert_converged()
        execute(
            kind,
            f"ALTER TABLE {t} RENAME COLUMN note TO memo",
            f"ALTER TABLE {t} ADD COLUMN flag INT NOT NULL DEFAULT 7",
            f"UPDATE {t} SET v = v + 100 WHERE id <= 2",
        )
        sc.run_once()
        for name in ("search", "cache", "warehouse"):
            needed = reindex_needed.needed(sc.config, name)
            assert list(needed) == [f"{ns}.{t}"] and "RENAME" in needed[f"{ns}.{t}"]["reason"], (name, needed)
        dirty = [r for r in sc.verify() if not r.clean]
        assert {r.follower for r in dirty} == {"search", "cache", "warehouse"}, dirty  # rows 3.. lack memo, flag

        for cfg in sc.config.followers:
            summary = reindex(sc.config, cfg, spark, table=f"{ns}.{t}", origin="source")
            assert summary.fill.records >= ROWS, summary.as_json()
        sc.assert_converged()
        assert all(not reindex_needed.needed(sc.config, f.name) for f in sc.config.followers)
        execute(kind, f"UPDATE {t} SET memo = 'after' WHERE id = 5")  # and streaming goes on on the new shape
        sc.run_once()
        sc.assert_converged()


@pytest.mark.parametrize("kind", MARIADB_LONG)
def test_a_rename_and_a_drop_while_the_followers_are_stopped_are_noticed_when_they_start(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    """Migrations run during a deploy, with the daemon stopped: the followers start on the new shape and see no
    change event showing the old one. The shape each remembered is compared with the catalog's: the dropped
    column leaves every row, the rename is recorded for a rebuild, and that rebuild converges."""
    from cdcsync.snapshot.reindex import reindex
    from cdcsync.sync import reindex_needed

    t = f"off_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    ddl = table_of(kind, t, "id INT PRIMARY KEY, v INT NOT NULL, note TEXT, junk TEXT", "n, CONCAT('n', n), 'j'")
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, ddl) as sc:
        sc.run_once()
        sc.assert_converged()
        sc.followers.clear()  # the daemon stops; the migration runs
        execute(kind, f"ALTER TABLE {t} RENAME COLUMN note TO memo", f"ALTER TABLE {t} DROP COLUMN junk")
        sc.run_once()  # and it starts again
        target = sc.followers["cache"].mappings[next(iter(sc.followers["cache"].mappings))].target
        for name in ("search", "cache", "warehouse"):
            needed = reindex_needed.needed(sc.config, name)
            assert "while the follower was stopped" in needed.get(f"{ns}.{t}", {}).get("reason", ""), (name, needed)
            assert all("junk" not in doc for _, doc in sc.held(name, target).values()), name  # forgotten everywhere
        for cfg in sc.config.followers:
            reindex(sc.config, cfg, spark, table=f"{ns}.{t}", origin="source")
        sc.followers.clear()
        sc.run_once()
        sc.assert_converged()
        assert all(not reindex_needed.needed(sc.config, f.name) for f in sc.config.followers)  # not marked again


@pytest.mark.parametrize("kind", MARIADB_LONG)
def test_widening_int_to_bigint_and_varchar_to_text_needs_nothing(spark: Any, tmp_path: Path, kind: str) -> None:
    """The sinks' types are the wide ones already (BIGINT, string, long, text): values past the old bounds fit."""
    t = f"wide_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    ddl = table_of(kind, t, "id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(8)", "n, CONCAT('s', n)")
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, ddl) as sc:
        sc.run_once()
        widen = (
            [f"ALTER TABLE {t} ALTER COLUMN v TYPE bigint", f"ALTER TABLE {t} ALTER COLUMN s TYPE text"]
            if kind == "postgres"
            else [f"ALTER TABLE {t} MODIFY v BIGINT NOT NULL", f"ALTER TABLE {t} MODIFY s TEXT"]
        )
        long_text = "w" * 5000
        execute(kind, *widen, f"UPDATE {t} SET v = 9000000000 + id, s = '{long_text}' WHERE id <= 5")
        sc.run_once()
        sc.assert_converged()
        held = sc.held("cache", sc.followers["cache"].mappings[next(iter(sc.followers["cache"].mappings))].target)
        assert held["3"][1]["v"] == "9000000003" and len(held["3"][1]["s"]) == 5000, held["3"]


@pytest.mark.parametrize("kind", MARIADB_LONG)
def test_a_type_change_no_sink_widens_is_named_for_a_rebuild_which_converges(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    """int -> text: the daemon's kind check records the table; a follower restarted before the rebuild refuses it
    alone, naming the same command; ``reindex --from source`` makes every store equal the source, and the
    next start takes the table up again at once."""
    from cdcsync.snapshot.reindex import reindex
    from cdcsync.sync import held, reindex_needed
    from cdcsync.sync.build import build_follower

    t = f"kind_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, numbered_table(t, ROWS, kind)) as sc:
        sc.run_once()
        retype = f"ALTER TABLE {t} ALTER COLUMN v TYPE text" if kind == "postgres" else f"ALTER TABLE {t} MODIFY v TEXT"
        ten = "'x' || id" if kind == "postgres" else "CONCAT('x', id)"
        execute(kind, retype, f"UPDATE {t} SET v = {ten} WHERE id <= 3")
        for name, follower in sc.followers.items():
            reindex_needed.check_kinds(sc.config, follower)
            assert "v int -> text" in reindex_needed.needed(sc.config, name)[f"{ns}.{t}"]["reason"], name
        sc.run_once()  # 'x1' is no bigint: Elasticsearch and Delta dead-letter those rows, Redis takes them

        for name in ("search", "warehouse"):  # a restart before the rebuild: the table is held, the command named
            build_follower(sc.config, sc.config.follower(name), spark).sink.close()
            [entry] = held.holding(sc.config, name).values()
            assert re.match(f"run `cdcsync reindex {name} --table .* --from source`", entry["fix"]), entry
        target = sc.followers["cache"].mappings[next(iter(sc.followers["cache"].mappings))].target
        with polled(sc, target) as seen:  # readers of every store throughout the rebuilds
            for cfg in sc.config.followers:
                reindex(sc.config, cfg, spark, table=f"{ns}.{t}", origin="source")
        assert all(seen[name] and min(seen[name]) >= ROWS for name in seen), seen  # never empty, never partial
        sc.followers.clear()
        execute(kind, f"UPDATE {t} SET v = 'after' WHERE id = 4")
        sc.run_once()
        sc.assert_converged()
        assert all(not reindex_needed.needed(sc.config, f.name) for f in sc.config.followers)
        assert all(not held.holding(sc.config, f.name) for f in sc.config.followers)


@pytest.mark.parametrize("kind", MARIADB_LONG)
def test_a_table_added_to_a_running_deployment_is_bootstrapped_alone(spark: Any, tmp_path: Path, kind: str) -> None:
    """A table with rows already in it is added to ``cdcsync.yaml``: ``connectors apply`` has capture snapshot it
    (incrementally, while it streams), a restarted follower reads its new topic from the start while its other
    table goes on from its position, and every store equals the source, rows changed during the snapshot included.

    The table has a composite text key and some 20 KB rows; the writer updates, deletes, inserts and changes keys
    while the snapshot runs. Its name has what a regex reads as syntax (a dot, brackets, a plus): the snapshot
    signal names it as Debezium matches it, literally.
    """
    import threading

    from cdcsync.config import Config
    from cdcsync.connectors.apply import apply
    from cdcsync.connectors.topics import delete_topics

    t, late_name = f"old_{kind[:2]}_{uid()}", f"Late (v2+).{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    late = f'"{late_name}"' if kind == "postgres" else f"`{late_name}`"
    rows = 1500
    ids = f"generate_series(1, {rows}) AS g(n)" if kind == "postgres" else f"(SELECT seq AS n FROM seq_1_to_{rows}) g"
    body = "CASE WHEN n % 10 = 0 THEN REPEAT('w', 20000) ELSE CONCAT('b', n) END"
    execute(
        kind,
        f"CREATE TABLE {late} (region VARCHAR(16), n INT, body TEXT NOT NULL, PRIMARY KEY (region, n))",
        f"INSERT INTO {late} SELECT CONCAT('r', n % 3), n, {body} FROM {ids}",
    )
    config: Config | None = None
    try:
        with scenario(spark, tmp_path, {kind: [f"{ns}.{t}"]}, numbered_table(t, ROWS, kind)) as sc:
            sc.run_once()
            execute(kind, f"UPDATE {t} SET v = v + 1000 WHERE id <= 5")

            added = {"namespace": ns, "table": late_name}
            raw = {**sc.raw, "sources": [{**sc.raw["sources"][0], "tables": [*sc.raw["sources"][0]["tables"],
                                                                              added]}]}  # fmt: skip
            config = Config.model_validate(raw)
            stop, errors = threading.Event(), []

            def write() -> None:  # during the snapshot: updates, deletes, inserts and key changes
                i = 0
                try:
                    while not stop.is_set() and i < 1000:
                        i += 1
                        n = (i * 7) % rows + 1
                        execute(
                            kind,
                            f"UPDATE {late} SET body = CONCAT(body, '+') WHERE n = {n}",
                            f"DELETE FROM {late} WHERE n = {(i * 13) % rows + 1} AND n % 5 = 1",  # a fifth, at most
                            f"INSERT INTO {late} VALUES ('new', {100000 + i}, 'i{i}')",
                            f"UPDATE {late} SET n = n + 200000 WHERE region = 'new' AND n = {100000 + i - 5}",
                        )
                        time.sleep(0.01)
                except BaseException as err:
                    errors.append(err)

            writer = threading.Thread(target=write)
            writer.start()
            try:
                results = apply(config)
                assert results[0].snapshot == [f"{ns}.{late_name}"], results[0].as_dict()
                assert apply(config)[0].snapshot == []  # signalled once
                sc.config = config
                sc.followers.clear()  # the daemon's restart: new mappings, same checkpoints
                sc.run_once()
                time.sleep(5)
            finally:
                stop.set()
                writer.join()
            assert not errors, errors

            deadline = time.monotonic() + 300
            while True:  # the snapshot runs in chunks behind the writes: converged once it has read the table
                sc.run_once()
                dirty = [r.as_dict() for r in sc.verify() if not r.clean]
                if not dirty or time.monotonic() > deadline:
                    break
                time.sleep(5)
            assert not dirty, dirty
            held = sc.held(
                "cache", sc.followers["cache"].mappings[config.sources[0].topic(config.sources[0].tables[-1])].target
            )
            assert len(held) >= rows - rows // 5 and any(
                len(str(doc.get("body", ""))) >= 20000 for _, doc in held.values()
            )
    finally:
        if config is not None:
            delete_topics(config, [config.sources[0].topic(config.sources[0].tables[-1])])
        execute(kind, f"DROP TABLE IF EXISTS {late}")
