"""The log and the catalog disagree, and every follower still converges (docs/schema-changes.md, docs/types.md).

- A generated column: Postgres never writes it to the WAL, so no change
  carries it. It is left out of every store, and ``verify`` leaves it out of
  the source's rows, on a follower that also follows a plain table.
- A follower behind an ``ADD COLUMN ... DEFAULT``: stopped across the
  migration, it reads changes written before the column existed (applied as
  they are), and the rows the source filled with the default without a
  change event are backfilled through the log (an incremental snapshot,
  ``sync.backfill``), once for all followers, with no command.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.followers import Scenario, numbered_table, scenario
from tests.support import end_offset, execute, uid

ROWS = 30
FOLLOWERS = ("search", "cache", "warehouse")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-drift-tests")
    yield session
    session.stop()


def target_of(sc: Scenario, table: str) -> str:
    return next(m.target for m in sc.followers["cache"].mappings.values() if m.table.endswith(f".{table}"))


def converge(sc: Scenario, timeout_s: float = 240) -> None:
    """Run every follower once until verify is clean (capture's snapshot rows may still be on their way)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sc.run_once()
        bad = [r.as_dict() for r in sc.verify() if not r.clean]
        if not bad:
            return
        assert time.monotonic() < deadline, bad
        time.sleep(2)


@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])
def test_a_generated_column_is_left_out_and_the_other_tables_go_on(spark: Any, tmp_path: Path, kind: str) -> None:
    t, plain = f"gen_{kind[:2]}_{uid()}", f"plain_{kind[:2]}_{uid()}"
    ns = "public" if kind == "postgres" else "inventory"
    generated = (
        "twice INT GENERATED ALWAYS AS (v * 2) STORED"
        if kind == "postgres"
        else "twice INT AS (v * 2) PERSISTENT, plus INT AS (v + 1) VIRTUAL, hidden INT INVISIBLE DEFAULT 5"
    )
    ddl = {kind: [f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT NOT NULL, {generated})",
                  f"INSERT INTO {t} (id, v) SELECT id, v FROM {plain}"]}  # fmt: skip
    tables = numbered_table(plain, ROWS, kind)
    with scenario(spark, tmp_path, {kind: [f"{ns}.{t}", f"{ns}.{plain}"]}, {kind: tables[kind] + ddl[kind]}) as sc:
        execute(kind, f"UPDATE {t} SET v = v + 100 WHERE id <= 5", f"DELETE FROM {t} WHERE id = 7",
                f"INSERT INTO {t} (id, v) VALUES (500, 5)", f"UPDATE {plain} SET v = 0 WHERE id = 3")  # fmt: skip
        sc.run_once()
        sc.assert_converged()
        for name in FOLLOWERS:
            docs = sc.docs(name, target_of(sc, t))
            assert len(docs) == ROWS and all("twice" not in d and "plus" not in d for d in docs.values()), name
            assert sc.docs(name, target_of(sc, plain))["3"]["v"] in (0, "0"), name
        for cfg in sc.config.followers:  # nothing was dead-lettered: a value the database accepted is no poison
            assert end_offset(cfg.dlq_topic) == 0, cfg.name


def test_a_follower_behind_an_add_column_default_catches_up_and_the_default_is_backfilled(
    spark: Any, tmp_path: Path
) -> None:
    from cdcsync.sync import backfill, reindex_needed

    t = f"dflt_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, ROWS)) as sc:
        sc.run_once()
        sc.assert_converged()
        execute("postgres", f"UPDATE {t} SET v = v + 1 WHERE id <= 3")  # changes the followers will read late
        sc.followers.clear()  # the daemon stops; the migration runs; rows go on changing
        execute(
            "postgres",
            f"ALTER TABLE {t} ADD COLUMN w INT NOT NULL DEFAULT 7",
            f"INSERT INTO {t} (id, v) VALUES (1000, 1000)",
            f"UPDATE {t} SET w = 8 WHERE id = 2",
        )
        converge(sc)  # the daemon starts again: behind the ALTER, with the catalog past it
        for name in FOLLOWERS:
            docs = sc.docs(name, target_of(sc, t))
            ws = {ident: str(doc.get("w")) for ident, doc in docs.items()}
            assert ws["2"] == "8" and ws["1000"] == "7" and ws["20"] == "7", (name, ws)
            assert not reindex_needed.needed(sc.config, name), name
        source = sc.config.sources[0]
        asked = backfill.requested(sc.config, source.name)
        assert list(asked) == [f"public.{t}"] and asked[f"public.{t}"]["columns"] == ["w"], asked  # once for all

        # A follower that runs across the same kind of migration asks nothing more of the ones that know it.
        execute("postgres", f"ALTER TABLE {t} ADD COLUMN z TEXT NOT NULL DEFAULT 'zed'",
                f"UPDATE {t} SET v = -1 WHERE id = 4")  # fmt: skip
        converge(sc)
        assert all(str(d.get("z")) == "zed" for d in sc.docs("search", target_of(sc, t)).values())
        assert backfill.requested(sc.config, source.name)[f"public.{t}"]["columns"] == ["w", "z"]
