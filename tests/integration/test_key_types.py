"""Primary keys that are not integers: one document per row, whatever path wrote it.

A row's document id is built from Debezium's key JSON when streamed (or
replayed by ``bootstrap --from topics``) and from driver values when read
from the database (``bootstrap --from source``, ``verify``). Both must give
the same id, or a row gets two documents and a streamed delete removes only
one of them. Each table here is keyed by one type: date, timestamp (with and
without zone), time, decimal, bytes, uuid, a composite text + date, and
text longer than the 512 bytes an Elasticsearch ``_id`` takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.snapshot.bootstrap import bootstrap_from_topics
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.stream import checkpoint_dir
from tests.integration.followers import Scenario, scenario
from tests.support import execute, uid

FOLLOWERS = ("search", "cache", "warehouse")

UUIDS = ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A12'"]
# table suffix -> (key columns DDL by kind, key literals of the rows, by kind). Every row also has v INT.
POSTGRES: dict[str, tuple[str, list[str]]] = {
    "d": ("k date", ["'2024-02-29'", "'1999-12-31'", "'0001-01-01'"]),
    "ts": ("k timestamp(6)", ["'2024-02-29 13:45:30.123456'", "'2024-02-29 13:45:30'", "'2000-01-01 00:00:00.5'"]),
    "tz": ("k timestamptz(6)", ["'2024-02-29 13:45:30.123456+02'", "'2024-02-29 23:30:00-05'", "'1970-01-01 00:00Z'"]),
    "t": ("k time(6)", ["'13:45:30.123456'", "'00:00:00'", "'23:59:59.5'"]),
    "n": ("k numeric(12,2)", ["12.50", "-0.01", "100"]),
    "b": ("k bytea", ["'\\x00ff10'::bytea", "'\\x7c'::bytea", "'\\xdeadbeef'::bytea"]),
    "u": ("k uuid", [*UUIDS, "gen_random_uuid()"]),
    "c": ("a text, k date", ["'x|y', '2024-02-29'", "'x', '2024-03-01'", "'y\\', '2024-02-29'"]),
    # keys past the 512 bytes an Elasticsearch _id takes (a URL as the key): stored under a digest, kept whole
    "url": ("k text", ["repeat('https://example.org/a/', 40)", "repeat('é', 300)", "'short'"]),
}
MARIADB: dict[str, tuple[str, list[str]]] = {
    "d": ("k DATE", ["'2024-02-29'", "'1999-12-31'", "'1000-01-01'"]),
    "ts": ("k DATETIME(6)", ["'2024-02-29 13:45:30.123456'", "'2024-02-29 13:45:30'", "'2000-01-01 00:00:00.5'"]),
    "tz": ("k TIMESTAMP(6)", ["'2024-02-29 13:45:30.123456'", "'2024-02-29 23:30:00'", "'1970-01-02 00:00:00'"]),
    "ts3": ("k DATETIME(3)", ["'2024-02-29 13:45:30.123'", "'1969-12-31 23:59:59.999'", "'1000-01-01 00:00:00'"]),
    "t": ("k TIME(6)", ["'13:45:30.123456'", "'838:59:59.5'", "'-01:00:00.000001'"]),  # a duration, not a time of day
    "n": ("k DECIMAL(12,2)", ["12.50", "-0.01", "100"]),
    "b": ("k VARBINARY(16)", ["x'00ff10'", "x'7c'", "x'deadbeef'"]),
    "u": ("k UUID", [*UUIDS, "UUID()"]),
    "u36": ("k CHAR(36)", [*UUIDS, "UUID()"]),  # a uuid kept as text: its id is the text, case included
    "c": ("a VARCHAR(20), k DATE", ["'x|y', '2024-02-29'", "'x', '2024-03-01'", "'y\\\\', '2024-02-29'"]),
    "url": ("k VARCHAR(700)", ["REPEAT('https://example.org/a/', 30)", "REPEAT('é', 300)", "'short'"]),
}
ROWS = 3


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-key-types-tests")
    yield session
    session.stop()


def _tables(kind: str, tag: str) -> dict[str, str]:
    """table suffix -> table name."""
    return {suffix: f"key_{suffix}_{tag}" for suffix in (POSTGRES if kind == "postgres" else MARIADB)}


def _ddl(kind: str, tables: dict[str, str]) -> list[str]:
    spec = POSTGRES if kind == "postgres" else MARIADB
    statements = []
    for suffix, name in tables.items():
        columns, literals = spec[suffix]
        key = ", ".join(part.split()[0] for part in columns.split(", "))
        statements.append(f"CREATE TABLE {name} ({columns}, v INT NOT NULL, PRIMARY KEY ({key}))")
        statements += [f"INSERT INTO {name} VALUES ({literal}, {i})" for i, literal in enumerate(literals, 1)]
    return statements


def _counts(sc: Scenario, tables: dict[str, str]) -> dict[tuple[str, str], int]:
    """(follower, table) -> documents the store holds."""
    return {(f, t): len(sc.held(f, t)) for f in FOLLOWERS for t in tables.values()}


def _assert_one_document_per_row(sc: Scenario, tables: dict[str, str], rows: int) -> None:
    counts = _counts(sc, tables)
    assert counts == {key: rows for key in counts}, counts
    sc.assert_converged()


def _update_then_delete(sc: Scenario, kind: str, tables: dict[str, str]) -> None:
    """Stream an update of every row, then the delete of the second row (v = 12): nothing may stay behind."""
    execute(kind, *(f"UPDATE {t} SET v = v + 10" for t in tables.values()))
    sc.run_once()
    _assert_one_document_per_row(sc, tables, ROWS)
    for f in FOLLOWERS:
        for t in tables.values():
            assert sorted(int(doc["v"]) for _version, doc in sc.held(f, t).values()) == [11, 12, 13], (f, t)
    execute(kind, *(f"DELETE FROM {t} WHERE v = 12" for t in tables.values()))
    sc.run_once()
    _assert_one_document_per_row(sc, tables, ROWS - 1)
    for f in FOLLOWERS:
        for t in tables.values():
            assert sorted(int(doc["v"]) for _version, doc in sc.held(f, t).values()) == [11, 13], (f, t)


@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])
def test_source_bootstrap_ids_are_the_streamed_ids(spark: Any, tmp_path: Path, kind: str) -> None:
    """Rows come from the database read only (the topics never saw them), then the stream changes them."""
    tag = uid()
    tables = _tables(kind, tag)
    namespace = "public" if kind == "postgres" else "inventory"
    with scenario(
        spark,
        tmp_path,
        {kind: [f"{namespace}.{t}" for t in tables.values()]},
        {kind: _ddl(kind, tables)},
        source_options={"snapshot_mode": "no_data"},
    ) as sc:
        sc.bootstrap_from_source()
        _assert_one_document_per_row(sc, tables, ROWS)
        _update_then_delete(sc, kind, tables)


# `make test` runs Postgres; `make chaos` MariaDB too, like the source-bootstrap twin above.
@pytest.mark.parametrize("kind", ["postgres", pytest.param("mariadb", marks=pytest.mark.long)])
def test_topic_bootstrap_and_stream_ids_are_the_source_ids(spark: Any, tmp_path: Path, kind: str) -> None:
    """Rows come from the topics (Debezium's initial snapshot); ``verify`` reads them from the database."""
    tag = uid()
    tables = _tables(kind, tag)
    namespace = "public" if kind == "postgres" else "inventory"
    with scenario(
        spark, tmp_path, {kind: [f"{namespace}.{t}" for t in tables.values()]}, {kind: _ddl(kind, tables)}
    ) as sc:
        sc.caught_up()
        for cfg in sc.config.followers:
            follower = build_follower(sc.config, cfg, spark)
            summary = bootstrap_from_topics(
                sc.config, cfg, follower, checkpoint_dir(sc.config, cfg), base_dir(sc.config)
            )
            assert summary.dead_lettered == 0, summary
            sc.followers[cfg.name] = follower
        _assert_one_document_per_row(sc, tables, ROWS)
        _update_then_delete(sc, kind, tables)
