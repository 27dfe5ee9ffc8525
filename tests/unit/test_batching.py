"""A batch's record limit follows the size of the rows about to be read (plain data)."""

from __future__ import annotations

from cdcsync.sync.batching import MIN_RECORDS, records_per_batch

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
    from cdcsync.config import BATCH_BYTES, BATCH_RECORDS, FollowerConfig

    warehouse = FollowerConfig(name="w", kind="delta")
    search = FollowerConfig(name="s", kind="elasticsearch", url="http://es:9200")
    # The warehouse collects its batch on the driver: its limits bound the heap, and stay small.
    assert (warehouse.batch_records, warehouse.batch_bytes) == (20_000, 16 * MIB)
    # Search and cache stream their batch through the tasks: larger batches, fewer fixed costs.
    assert (search.batch_records, search.batch_bytes) == (BATCH_RECORDS["elasticsearch"], BATCH_BYTES["elasticsearch"])
    assert search.batch_records > warehouse.batch_records and search.batch_bytes > warehouse.batch_bytes
    tuned = FollowerConfig(
        name="c", kind="redis", url="redis://cache:6379/0", max_offsets_per_trigger=500, max_batch_bytes=2 * MIB
    )
    assert (tuned.batch_records, tuned.batch_bytes) == (500, 2 * MIB)
