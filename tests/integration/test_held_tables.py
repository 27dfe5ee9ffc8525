"""One table, one failure domain (``sync.held``): a table its sink fails for alone is held; the others go on.

Two tables follow into Elasticsearch (applied on the executors) and the Delta
warehouse (on the driver). Then one table is broken in each store the way an
operator could: its index closed, its Delta table made append-only. While
both tables change, the other table must converge in both stores, the broken
one be held (named with its reason and fix) and no change be dead-lettered;
once each store is fixed, the held table resumes from where it stopped, with
no reindex, and every table verifies clean. The same for a table whose new
column the index cannot hold (the sink refuses its shape), until the column
is renamed for that follower.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from cdcsync.config import Config
from cdcsync.sync import held
from cdcsync.sync.sinks import build_sink
from cdcsync.sync.verify.compare import verify_follower
from tests.integration.followers import Scenario, numbered_table, scenario
from tests.support import ENV, end_offset, execute, uid

FOLLOWERS = ("search", "warehouse")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-held-tests")
    yield session
    session.stop()


def clean(sc: Scenario, table: str, *names: str) -> bool:
    """``verify --table`` of each follower: the held table's store may refuse reads too (a closed index)."""
    reports = []
    for cfg in sc.config.followers:
        if cfg.name in (names or FOLLOWERS):
            reports += verify_follower(
                sc.config, cfg, build_sink(sc.config, cfg, sc.spark), only=f"{sc.config.sources[0].name}.public.{table}"
            )
    return bool(reports) and all(r.clean for r in reports)


def change(*tables: str, round_: int) -> None:
    for t in tables:
        execute(
            "postgres",
            f"UPDATE {t} SET v = v + 100 WHERE id <= 10",
            f"DELETE FROM {t} WHERE id = {20 - round_}",
            f"INSERT INTO {t} VALUES ({1000 + round_}, {round_})",
        )


def test_a_table_its_sinks_fail_for_is_held_alone_and_resumes_where_it_stopped_after_the_fix(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken, fine = f"held_{uid()}", f"fine_{uid()}"
    ddl = numbered_table(broken, 20)["postgres"] + numbered_table(fine, 20)["postgres"]
    with scenario(spark, tmp_path, {"postgres": [f"public.{broken}", f"public.{fine}"]}, {"postgres": ddl}) as sc:
        # The hold comes after the follower's attempts: few, to keep the test short.
        sc.raw["followers"] = [{**f, "sink_attempts": 2} for f in sc.raw["followers"]]
        sc.config = Config.model_validate(sc.raw)
        sc.run_once(*FOLLOWERS)
        assert clean(sc, broken) and clean(sc, fine)

        search, warehouse = (next(f for f in sc.config.followers if f.name == n) for n in FOLLOWERS)
        target = next(m.target for m in sc.followers["search"].mappings.values() if m.table.endswith(broken))
        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        index = next(iter(es.indices.get_alias(name=sc.followers["search"].sink.alias(target))))
        es.indices.close(index=index)
        path = f"{warehouse.path}/{target}"
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'true')")

        change(broken, fine, round_=1)
        sc.run_once(*FOLLOWERS)
        assert clean(sc, fine), "the other table stopped with the broken one"
        for f in (search, warehouse):
            [line] = held.lines(sc.config, f.name)
            assert broken in line and "fix:" in line, line
        assert "closed" in held.lines(sc.config, "search")[0] and "_open" in held.lines(sc.config, "search")[0]
        assert "append" in held.lines(sc.config, "warehouse")[0]
        since = {f.name: held.holding(sc.config, f.name) for f in (search, warehouse)}

        change(broken, fine, round_=2)  # still broken, tried again: held from where it first stopped
        monkeypatch.setattr(held, "RETRY_S", 0.0)
        sc.run_once(*FOLLOWERS)
        assert clean(sc, fine)
        for f in (search, warehouse):
            [(topic, entry)] = held.holding(sc.config, f.name).items()
            assert entry["since"] == since[f.name][topic]["since"]

        es.indices.open(index=index)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
        change(broken, fine, round_=3)
        sc.run_once(*FOLLOWERS)
        assert held.holding(sc.config, "search") == {} and held.holding(sc.config, "warehouse") == {}
        sc.assert_converged(*FOLLOWERS)
        for f in (search, warehouse):  # nothing the database accepted was dead-lettered
            assert end_offset(f.dlq_topic) == 0, f.name


def test_a_table_whose_new_column_the_index_cannot_hold_is_held_until_the_column_is_renamed(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Postgres takes a column named "v.x" beside "v"; Elasticsearch reads the dot as a path under v, a number.
    shaped, fine = f"shaped_{uid()}", f"fine_{uid()}"
    ddl = numbered_table(shaped, 20)["postgres"] + numbered_table(fine, 20)["postgres"]
    with scenario(spark, tmp_path, {"postgres": [f"public.{shaped}", f"public.{fine}"]}, {"postgres": ddl}) as sc:
        sc.run_once("search")
        grow = f'ALTER TABLE {shaped} ADD COLUMN "v.x" INT'
        execute("postgres", grow, f'UPDATE {shaped} SET "v.x" = id WHERE id < 5')
        change(shaped, fine, round_=1)
        sc.run_once("search")
        assert clean(sc, fine, "search"), "the other table stopped with the one whose shape the index refused"
        [line] = held.lines(sc.config, "search")
        assert shaped in line and "v.x" in line and "rename" in line, line

        # The fix the line names: the column under another name in this follower's store, then a restart.
        search = next(f for f in sc.raw["followers"] if f["name"] == "search")
        search["mappings"] = {f"public.{shaped}": {"rename": {"v.x": "v_x"}}}
        sc.config = Config.model_validate(sc.raw)
        sc.followers.pop("search")
        monkeypatch.setattr(held, "RETRY_S", 0.0)
        change(shaped, fine, round_=2)
        sc.run_once("search")
        assert held.holding(sc.config, "search") == {}
        sc.assert_converged("search")
        assert end_offset(next(f for f in sc.config.followers if f.name == "search").dlq_topic) == 0
