"""``verify`` agrees with every store on edge values, and a stale row's report names the columns that differ.

Each value here is one the stores hold as they should; a verify that calls
such a row stale would have the daemon's background pass report (and, with
``auto_repair``, re-read) it forever. Then one value is changed behind the
log's back in one store, and the report must name that column with both
values.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.followers import scenario
from tests.support import ENV, execute, uid

# (id, a time of day, a time with its zone, a numeric array, a date): in Debezium's initial snapshot
ROWS = [
    (1, "'13:45:30.123456'", "'13:45:30.123456+02'", "'{1.5,-2.25,100,1.50}'", "'0044-03-15 BC'"),
    (2, "'00:00:00'", "'00:30:00-03'", "'{}'", "'4713-01-01 BC'"),
    (3, "'23:59:59.999999'", "'23:59:59+05:30'", "'{0.000001,123456789012345678.5}'", "'0001-01-01'"),
    (4, "'24:00:00'", "'24:00:00+00'", "NULL", "NULL"),
    (5, "NULL", "'12:00:00+14'", "'{NULL,7}'", "'2026-12-07'"),
    # Values Debezium cannot send as they are, read again from the source (sync.reselect): a numeric[] holding
    # NaN or an infinity arrives as null; a snapshot's date before year 1 arrives without its era.
    (6, "NULL", "NULL", "'{NaN,1.50}'", "'0001-12-31 BC'"),
    (7, "NULL", "NULL", "'{Infinity,-Infinity,NULL}'", "'5874897-12-31'"),
]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-verify-edge-tests")
    yield session
    session.stop()


def test_time_values_and_numeric_arrays_verify_clean_and_a_stale_row_names_its_columns(
    spark: Any, tmp_path: Path
) -> None:
    t = f"edges_{uid()}"
    ddl = [f"CREATE TABLE {t} (id INT PRIMARY KEY, t time, tz timetz, nums numeric[], d date, note TEXT)"]
    ddl += [f"INSERT INTO {t} VALUES ({i}, {a}, {b}, {c}, {d}, 'n{i}')" for i, a, b, c, d in ROWS]
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, {"postgres": ddl}) as sc:
        execute(
            "postgres",
            f"UPDATE {t} SET note = 'changed' WHERE id IN (3, 6)",  # streamed: the NaN array read again
            f"INSERT INTO {t} VALUES (8, NULL, NULL, '{{-Infinity}}', '0100-02-03 BC', 'n8')",
        )
        sc.run_once()
        sc.assert_converged()
        target = next(iter(sc.followers["search"].mappings.values())).target
        for follower in ("search", "cache", "warehouse"):
            docs = sc.docs(follower, target)
            assert "NaN" in str(docs["6"]["nums"]) and str(docs["1"]["d"]) == "-0043-03-15", (follower, docs)

        # A stray write into one store: the report names the column, with the source's and the store's values.
        target = next(iter(sc.followers["cache"].mappings.values())).target
        r = redis.Redis(port=int(ENV["REDIS_PORT"]))
        key = next(k for k in r.scan_iter(f"{sc.tag}:{target}:2", count=1000))
        r.hset(key, "note", "stray")
        [report] = [rep for rep in sc.verify("cache") if not rep.clean]
        assert report.stale == ["2"], report.as_dict()
        assert report.differing["2"] == {"note": ["n2", "stray"]}, report.as_dict()
        assert report.as_dict()["differing"] == {"2": {"note": ["n2", "stray"]}}
