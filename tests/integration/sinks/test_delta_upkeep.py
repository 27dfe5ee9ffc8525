"""The warehouse's upkeep on real Spark + Delta: OPTIMIZE compacts, VACUUM LITE frees only what the window allows.

A table is written the way a follower leaves it: many small files, then
MERGEs of scattered keys that leave deletion vectors and replaced files.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcsync import metrics
from cdcsync.config import Config
from cdcsync.sync.delta_upkeep import Upkeep, disk_bytes, tidy

ROWS = 4000


@pytest.fixture(scope="module")
def spark(stack_up: None) -> Iterator[Any]:
    from cdcsync.spark import spark_session

    conf = {"spark.databricks.delta.snapshotPartitions": "2", "spark.sql.shuffle.partitions": "2"}
    yield spark_session("cdcsync-test-delta-sink", conf=conf)  # the run's session (getOrCreate)


def churned(spark: Any, path: str, merges: int = 4) -> list[Any]:
    """A table of ROWS rows in 16 files, then ``merges`` MERGEs of 300 scattered updates; its rows after."""
    spark.conf.set("spark.databricks.delta.autoCompact.enabled", "false")
    try:
        rows = spark.range(ROWS).selectExpr("id", "repeat(md5(cast(id as string)), 8) AS body", "1L AS v")
        rows.repartition(16).write.format("delta").save(path)
        for n in range(merges):
            ids = random.Random(n).sample(range(ROWS), 300)
            spark.createDataFrame([(i, f"m{n}-{i}", n + 2) for i in ids], "id long, body string, v long") \
                .createOrReplaceTempView("changes")  # fmt: skip
            spark.sql(
                f"MERGE INTO delta.`{path}` t USING changes s ON t.id = s.id "
                "WHEN MATCHED AND s.v > t.v THEN UPDATE SET *"
            )
    finally:
        spark.conf.set("spark.databricks.delta.autoCompact.enabled", "true")
    return sorted(spark.read.format("delta").load(path).collect())


def version(spark: Any, path: str, number: int) -> list[Any]:
    """A table version's rows, read from its files (a count alone comes from the log's statistics)."""
    return spark.read.format("delta").option("versionAsOf", number).load(path).select("body").collect()


def config_for(root: Path, retention_hours: int = 168) -> Config:
    source = {"name": "pg", "kind": "postgres", "port": 5432, "database": "d", "user": "u", "password": "p"}
    return Config.model_validate(
        {
            "sources": [{**source, "tables": ["public.items"]}],
            "followers": [{"name": "warehouse", "kind": "delta", "path": str(root)}],
            "delta": {"retention_hours": retention_hours},
        }
    )


def test_a_pass_compacts_keeps_the_window_and_exports_the_sizes(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "items")
    before = churned(spark, path)
    files_before = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].numFiles
    config = config_for(tmp_path)
    upkeep = Upkeep(config, list(config.followers), spark)

    sizes = upkeep.tick()

    size = sizes["warehouse", "public.items"]
    assert size.files < files_before and size.files <= 2, (files_before, size)
    assert sorted(spark.read.format("delta").load(path).collect()) == before  # the same rows, fewer files
    # Every replaced file is younger than the week: kept, so a version of the window still reads.
    assert len(version(spark, path, 1)) == ROWS
    assert size.disk_bytes == disk_bytes(path) and size.disk_bytes is not None and size.disk_bytes > size.bytes
    assert metrics.DELTA_FILES.labels("warehouse", "public.items")._value.get() == size.files
    assert metrics.DELTA_DISK_BYTES.labels("warehouse", "public.items")._value.get() == size.disk_bytes
    assert upkeep.tables(config.followers[0]) == [("public.items", path)]


def test_what_commits_before_the_window_replaced_is_vacuumed(spark: Any, tmp_path: Path) -> None:
    """A window of 0 hours, as after a week: VACUUM LITE frees the replaced files, the table reads the same."""
    path = str(tmp_path / "items")
    before = churned(spark, path)
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 0 hours')"
    )
    tidy(spark, path, 168)  # compacted; nothing old enough to go
    kept = disk_bytes(path)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        size = tidy(spark, path, 0)
    finally:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
    assert size is not None and size.disk_bytes is not None
    data = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and "_delta_log" not in f.parts)
    assert size.disk_bytes < kept and data <= 1.05 * size.bytes, (kept, data, size)  # live files (+ .crc) and the log
    assert sorted(spark.read.format("delta").load(path).collect()) == before
    with pytest.raises(Exception, match="(?i)file|not exist|not found"):  # the old version's files are gone
        version(spark, path, 1)


def test_a_table_not_written_yet_is_left_alone(spark: Any, tmp_path: Path) -> None:
    config = config_for(tmp_path)
    assert Upkeep(config, list(config.followers), spark).tick() == {}
    assert not (tmp_path / "items").exists()
