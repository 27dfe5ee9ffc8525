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
