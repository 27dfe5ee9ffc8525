"""Spark forks the followers' Python workers from cdcsync's fork server, which imported their modules once.

What that saves is measured by ``python -m bench.freshness`` (docs/performance.md, "Python workers forked
warm"); here: the workers are the real Spark's, forked from ``cdcsync.sync.fork_server``, and they find what
a follower's task needs already loaded before it imports anything itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdcsync.sync.fork_server import PRELOAD


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-fork-server-tests")
    yield session
    session.stop()


def test_workers_are_forked_from_cdcsyncs_fork_server_with_the_followers_modules_loaded(spark: Any) -> None:
    preload = PRELOAD

    def probe(batches: Iterator[Any]) -> Iterator[Any]:  # nested: pickled by value, imports nothing of cdcsync
        import sys

        loaded = [name for name in preload if name in sys.modules]  # before this task imports anything
        import os
        import zipimport

        import pyarrow as pa

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
            parent = cmdline.read().replace(b"\0", b" ").decode()
        lazy = bool(getattr(zipimport.zipimporter.invalidate_caches, "cdcsync_lazy", False))
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"parent": [parent], "loaded": [",".join(loaded)], "lazy": [lazy]})

    tasks = spark.sparkContext.defaultParallelism
    rows = (
        spark.range(0, tasks, 1, tasks)
        .mapInArrow(probe, "parent string, loaded string, lazy boolean")
        .toArrow()
        .to_pylist()
    )
    assert len(rows) == tasks
    for row in rows:
        assert "-m cdcsync.sync.fork_server pyspark.worker" in row["parent"], row
        assert row["loaded"].split(",") == list(PRELOAD), row
        assert row["lazy"], row  # the zip archives' directories were read in the fork server, not by each worker
