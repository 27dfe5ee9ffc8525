"""Kafka records a follower has read leave the driver's heap within seconds, not minutes.

Spark keeps each Kafka task's last poll in a pool, for a next task that
starts where it stopped. An order-free follower splits each batch across
tasks (sync.executors), so every batch leaves a new entry, and Spark's
default keeps an idle one for 5 minutes: ``bench.memory``'s catch-up of
60 KB rows had 850 MB of its 2 GiB heap in that pool (docs/daemon.md,
"Memory"). Here a follower reads wide rows in many small batches, and the
live ``ConsumerRecord`` objects in the JVM are counted (``jcmd``) until the
pool has let them go.
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
from cdcsync.sync.stream import build_follower, start_query
from tests.integration.followers import scenario
from tests.support import uid

ROWS, ROW_KB = 600, 8


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cdcsync.spark import spark_session

    session = spark_session("cdcsync-kafka-memory-tests")
    yield session
    session.stop()


def live_records(pid: int) -> int:
    """Live ``org.apache.kafka.clients.consumer.ConsumerRecord`` objects in JVM ``pid`` (a full GC first)."""
    jcmd = shutil.which("jcmd")
    assert jcmd, "jcmd (the JDK's) is needed to count the driver's live objects"
    histogram = subprocess.run([jcmd, str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=120)
    found = re.search(r"^\s*\d+:\s+(\d+)\s+\d+\s+org\.apache\.kafka\.clients\.consumer\.ConsumerRecord\s*$",
                      histogram.stdout, re.MULTILINE)  # fmt: skip
    return int(found.group(1)) if found else 0


def test_records_a_split_batch_read_are_let_go_within_seconds(spark: Any, tmp_path: Path) -> None:
    t = f"wide_{uid()}"
    ddl = [
        f"CREATE TABLE {t} (id INT PRIMARY KEY, body TEXT NOT NULL)",
        f"INSERT INTO {t} SELECT g, repeat(md5(g::text), {ROW_KB * 1024 // 32}) FROM generate_series(1, {ROWS}) g",
    ]
    with scenario(spark, tmp_path, {"postgres": [f"public.{t}"]}, {"postgres": ddl}) as sc:
        sc.caught_up()
        # Elasticsearch: an order-free sink, whose batches are split across tasks; 50 records a batch.
        cfg = sc.config.follower("search").model_copy(update={"max_offsets_per_trigger": 50})
        sc.followers["search"] = build_follower(sc.config, cfg, spark)
        query = start_query(spark, sc.config, cfg, sc.followers["search"], once=True)
        query.awaitTermination(600)
        assert query.exception() is None, query.exception()
        assert int(query.lastProgress["batchId"]) >= 10  # many batches, each leaving entries in the pool
        assert len(sc.held("search", t)) == ROWS

        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        idle_s = float(FETCHED_DATA_IDLE.rstrip("s"))
        deadline, counts = time.monotonic() + idle_s + 40, []
        while True:
            counts.append(live_records(pid))
            if counts[-1] == 0 or time.monotonic() > deadline:
                break
            time.sleep(5)
        # Spark's default (5 minutes) keeps hundreds of them, 8 KB each, through the whole wait.
        assert counts[-1] == 0, f"live ConsumerRecords every 5 s after the last batch: {counts}"
