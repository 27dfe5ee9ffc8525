"""What a follower's batches leave in the driver's heap is let go within seconds, not minutes or hundreds of batches.

Two holders filled ``bench.memory``'s 2 GiB heap (docs/daemon.md, "Memory"):

- Spark's Kafka fetched-data pool keeps each task's last poll for a next
  task that starts where it stopped, by default for 5 minutes after its last
  use. An order-free follower splits each batch across tasks
  (sync.executors), so every batch leaves a new entry: 850 MB of 60 KB rows.
- Py4J pins a JVM object while its Python proxy lives, and a proxy a method
  was called on is only freed by Python's cyclic collector, which the
  follower slows down (``tune_gc``). A Delta batch's MERGE source is such an
  object: an RDD of the batch's pickled rows.

Each test reads wide rows in many small batches, then counts the live JVM
objects of the holder (``jcmd <pid> GC.class_histogram``, after a full GC).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync.spark import FETCHED_DATA_IDLE
from cdcsync.sync.build import build_follower
from cdcsync.sync.stream import start_query
from tests.integration.followers import scenario
from tests.support import uid

ROWS, ROW_KB = 600, 8


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-kafka-memory-tests")
    yield session
    session.stop()


def live(spark: Any, java_class: str) -> int:
    """Live objects of ``java_class`` in this test's JVM (``jcmd`` runs a full GC first)."""
    jcmd = shutil.which("jcmd")
    assert jcmd, "jcmd (the JDK's) is needed to count the driver's live objects"
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    histogram = subprocess.run([jcmd, str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=120)
    found = re.search(rf"^\s*\d+:\s+(\d+)\s+\d+\s+{re.escape(java_class)}\s*$", histogram.stdout, re.MULTILINE)
    return int(found.group(1)) if found else 0


def wide_table(t: str) -> dict[str, list[str]]:
    return {
        "postgres": [
            f"CREATE TABLE {t} (id INT PRIMARY KEY, body TEXT NOT NULL)",
            f"INSERT INTO {t} SELECT g, repeat(md5(g::text), {ROW_KB * 1024 // 32}) FROM generate_series(1, {ROWS}) g",
        ]
    }


def test_records_a_split_batch_read_are_let_go_within_seconds(spark: Any, tmp_path: Path) -> None:
    t = f"wide_{uid()}"
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, wide_table(t)) as sc:
        sc.caught_up()
        # Elasticsearch: an order-free sink, whose batches are split across tasks; 50 records a batch.
        cfg = sc.config.follower("search").model_copy(update={"max_offsets_per_trigger": 50})
        sc.followers["search"] = build_follower(sc.config, cfg, spark)
        query = start_query(spark, sc.config, cfg, sc.followers["search"], once=True)
        query.awaitTermination(600)
        assert query.exception() is None, query.exception()
        assert int(query.lastProgress["batchId"]) >= 10  # many batches, each leaving entries in the pool
        assert len(sc.held("search", t)) == ROWS

        idle_s = float(FETCHED_DATA_IDLE.rstrip("s"))
        deadline, counts = time.monotonic() + idle_s + 40, []
        while True:
            counts.append(live(spark, "org.apache.kafka.clients.consumer.ConsumerRecord"))
            if counts[-1] == 0 or time.monotonic() > deadline:
                break
            time.sleep(5)
        # Spark's default (5 minutes) keeps hundreds of them, 8 KB each, through the whole wait.
        assert counts[-1] == 0, f"live ConsumerRecords every 5 s after the last batch: {counts}"


def test_a_delta_batch_leaves_no_merge_source_pinned_in_the_jvm(spark: Any, tmp_path: Path) -> None:
    t = f"wide_{uid()}"
    rdds = "org.apache.spark.rdd.ParallelCollectionRDD"  # what createDataFrame makes of a list of rows
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, wide_table(t)) as sc:
        sc.caught_up()
        cfg = sc.config.follower("warehouse").model_copy(update={"max_offsets_per_trigger": 50})
        sc.followers["warehouse"] = build_follower(sc.config, cfg, spark)
        before = live(spark, rdds)
        query = start_query(spark, sc.config, cfg, sc.followers["warehouse"], once=True)
        query.awaitTermination(600)
        assert query.exception() is None, query.exception()
        batches = int(query.lastProgress["batchId"]) + 1
        assert batches >= 10 and len(sc.held("warehouse", t)) == ROWS
        pinned = live(spark, rdds) - before
        # Without a collection per batch, most of the batches' MERGE sources were still live here.
        assert pinned <= 1, f"{pinned} MERGE sources of {batches} batches still live in the JVM"
