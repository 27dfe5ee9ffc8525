"""Schema changes while streaming: a column added to a followed table (docs/schema-changes.md).

ADD COLUMN of several common types on Postgres and MariaDB, then rows
written with them, with all three followers running: each sink must get
each new column with its natural type from its first row on (Delta: a
typed column, not text; Elasticsearch: an explicit field mapping, not a
dynamic guess), without a restart. A restart after it must not refuse the
table, and every store must equal the source.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from tests.integration.followers import numbered_table, scenario
from tests.support import ENV, execute, uid

ROWS = 20
ADDED = {  # column -> (Postgres type, MariaDB type, Delta type, Elasticsearch field type)
    "b": ("int", "int", "bigint", "long"),
    "price": ("numeric(10,2)", "decimal(10,2)", "decimal(38,10)", "keyword"),
    "born": ("date", "date", "date", "date"),
    "note": ("text", "text", "string", None),
}


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
        assert {c: delta.get(c) for c in ADDED} == {c: types[2] for c, types in ADDED.items()}, delta
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        fields = next(iter(es.indices.get_mapping(index=f"{sc.tag}-{target}").values()))["mappings"]["properties"]
        for column, types in ADDED.items():
            if types[3] is not None:
                assert fields.get(column, {}).get("type") == types[3], (column, fields.get(column))
        sc.assert_converged()

        # A restart reads the catalog afresh: the columns it finds must fit what the sinks made of them.
        sc.followers.clear()
        execute(kind, f"UPDATE {t} SET b = b + 1, price = price * 2 WHERE id <= 5")
        sc.run_once()
        sc.assert_converged()
        held = sc.held("warehouse", target)
        assert held["100"][1]["b"] == 7 and str(held["100"][1]["price"]).startswith("12.5"), held["100"]
