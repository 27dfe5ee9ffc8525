"""A batch's record limit follows the size of the rows about to be read (plain data)."""

from __future__ import annotations

from cdcsync.sync.batching import MIN_RECORDS, records_per_batch, task_options

MIB = 1024 * 1024


def test_narrow_rows_keep_the_configured_count() -> None:
    assert records_per_batch(64 * MIB, [200] * 100, 20_000) == 20_000


def test_wide_rows_bound_the_batch_by_bytes() -> None:
    sizes = [300] * 80 + [60_000] * 20  # a fifth of the rows are 60 KB: the 90th percentile decides
    assert records_per_batch(64 * MIB, sizes, 20_000) == 64 * MIB // 60_000


def test_never_below_the_floor_and_nothing_sampled_keeps_the_count() -> None:
    assert records_per_batch(MIB, [10 * MIB], 20_000) == MIN_RECORDS
    assert records_per_batch(MIB, [], 20_000) == 20_000


def test_batch_limits_default_by_sink_kind_and_follow_the_config() -> None:
    from cdcsync.config import ElasticsearchFollowerConfig, FollowerConfig

    warehouse = FollowerConfig(name="w", kind="delta")
    search = FollowerConfig(name="s", kind="elasticsearch", url="http://es:9200")
    # The warehouse collects its batch on the driver: its bytes bound what the heap holds (docs/daemon.md).
    assert (warehouse.batch_records, warehouse.batch_bytes) == (100_000, 64 * MIB)
    # Search and cache stream their batch through the tasks: larger batches, fewer fixed costs.
    assert isinstance(search, ElasticsearchFollowerConfig)  # a follower's config is its kind's class
    assert (search.batch_records, search.batch_bytes) == (200_000, 64 * MIB)
    assert (search.batch_records, search.batch_bytes) == (search.default_batch_records, search.default_batch_bytes)
    assert search.batch_records > warehouse.batch_records and search.batch_bytes >= warehouse.batch_bytes
    tuned = FollowerConfig(
        name="c", kind="redis", url="redis://cache:6379/0", max_offsets_per_trigger=500, max_batch_bytes=2 * MIB
    )
    assert (tuned.batch_records, tuned.batch_bytes) == (500, 2 * MIB)


def spark_tasks(options: dict[str, str], records: int) -> int:
    """How many tasks Spark's Kafka source makes of one partition's ``records`` (KafkaOffsetRangeCalculator)."""
    tasks = -(-records // int(options["maxRecordsPerPartition"])) if "maxRecordsPerPartition" in options else 1
    return max(tasks, int(options["minPartitions"]))


def test_a_full_batch_takes_two_tasks_per_core_locally_and_a_small_one_one() -> None:
    options = task_options(122_016, cores=2, local=True)
    assert spark_tasks(options, 122_016) == 4  # a follower behind: every core has two workers' GILs to switch to
    assert spark_tasks(options, 121_000) == 4
    assert spark_tasks(options, 900) == 2  # one that keeps up: a task's fixed start once per core
    assert spark_tasks(task_options(1, cores=2, local=True), 1) == 2


def test_on_a_cluster_a_batch_takes_one_task_per_executor_core() -> None:
    assert task_options(122_016, cores=8, local=False) == {"minPartitions": "8"}


def test_the_driver_takes_a_quarter_of_its_heap_in_results() -> None:
    from cdcsync.spark import result_bound

    assert [result_bound(m) for m in ("2g", "2G", "1536m", "8g", "256m", "1t")] == [
        "512m", "512m", "384m", "2048m", "64m", "262144m",
    ]  # fmt: skip


def test_a_deadline_is_derived_from_the_batch_bytes_unless_configured() -> None:
    from cdcsync.sync.deadline import deadline_s

    assert deadline_s(None, 64 * 1024 * 1024) == 120 + 64
    assert deadline_s(15.0, 64 * 1024 * 1024) == 15.0
