"""The range checksums' plain parts: which keys a range holds, which ranges differ, the rows the others hold."""

from __future__ import annotations

from cdcsync.sources import KINDS
from cdcsync.sync.verify import ranges


def _plan(low: int = 10, width: int = 5, buckets: int = 4) -> ranges.Plan:
    return ranges.Plan("postgres", "Id", low, width, buckets, "t", "s")


def _source_range(plan: ranges.Plan, key: int) -> int:
    """The range Postgres' bucket expression puts ``key`` in, computed as Postgres would."""
    high = plan.low + plan.width * plan.buckets - 1
    return (min(max(key, plan.low), high) - plan.low) // plan.width


def test_the_keys_of_a_run_of_ranges_are_those_the_bucket_puts_there_the_ends_open() -> None:
    plan = _plan()
    where = plan.source_where([0, 1, 3])
    assert where == '("Id" < 20) OR ("Id" >= 25)'
    chosen = {0, 1, 3}
    for key in range(-50, 80):  # before the first range and past the last: the open ends take them
        holds = key < 20 or key >= 25
        assert holds == (_source_range(plan, key) in chosen), key


def test_a_range_in_the_middle_has_both_bounds_and_every_range_is_the_whole_table() -> None:
    plan = _plan()
    assert plan.source_where([2]) == '("Id" >= 20 AND "Id" < 25)'
    assert plan.source_where([0, 1, 2, 3]) == "(true)"
    assert plan.store_where([3, 1]) == f"{plan.store_bucket()} IN (1, 3)"
    assert "try_cast(_cdcsync_id AS BIGINT)" in plan.store_bucket()  # an id that is no integer: range 0, not a failure


def test_ranges_differ_by_count_or_either_sum_and_a_range_on_one_side_only_differs() -> None:
    there = {0: (2, 10, 20), 1: (1, 5, 5), 2: (3, 1, 1), 4: (1, 1, 1)}
    held = {0: (2, 10, 20), 1: (1, 5, 6), 2: (2, 1, 1), 3: (1, 9, 9)}
    assert ranges.differing(there, held) == [1, 2, 3, 4]
    assert ranges.rows_of(there, {1, 2, 3, 4}) == 2 == ranges.rows_of(held, {1, 2, 3, 4})


def test_a_null_and_every_value_are_written_apart() -> None:
    """A null is ``~``, which no value's text starts with; text is length-prefixed, so no separator is ambiguous."""
    for pieces in [*(kind.checksums.pieces for kind in KINDS.values()), ranges.SPARK_PIECES]:
        assert "'~'" in ranges._piece("x", pieces, True) and "'~'" in ranges._piece("x", pieces, False)
        assert "octet_length" in ranges._piece("x", pieces, True).lower()
        assert "octet_length" not in ranges._piece("x", pieces, False).lower()


def test_many_runs_of_ranges_are_named_by_range_number_and_a_table_mostly_differing_is_read_by_row() -> None:
    plan = _plan(low=0, width=1, buckets=1000)
    scattered = list(range(0, 1000, 2))  # 500 runs
    where = plan.source_where(scattered)
    assert where.startswith(plan.source_bucket() + " = ANY('{0,2,4,") and where.endswith(",998}'::bigint[])")
    sums = {b: (1, b, b) for b in range(1000)}
    assert not ranges.mostly(sums, sums, list(range(250)))
    assert ranges.mostly(sums, sums, list(range(251)))
    assert ranges.mostly(sums, {b: s for b, s in sums.items() if b >= 900}, list(range(900, 1000)))
