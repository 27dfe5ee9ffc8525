"""A replay hands the change log to the follower in runs of whole read lists, read lazily (plain data)."""

from __future__ import annotations

from collections.abc import Iterator

from cdcsync.snapshot.replay import runs


def _lists(sizes: list[int]) -> list[list[int]]:
    start, out = 0, []
    for size in sizes:
        out.append(list(range(start, start + size)))
        start += size
    return out


def test_runs_are_whole_lists_up_to_the_size_in_log_order() -> None:
    handed: list[int] = []
    got = [list(run) for run in runs(_lists([3, 3, 3, 3, 2]), 6, handed.append)]
    assert got == [list(range(0, 6)), list(range(6, 12)), list(range(12, 14))]
    assert handed == [3, 3, 3, 3, 2]  # one call per list: the progress of a long run still moves


def test_a_run_may_pass_its_size_by_the_rest_of_a_list() -> None:
    got = [list(run) for run in runs(_lists([4, 4, 4]), 5, lambda n: None)]
    assert got == [list(range(0, 8)), list(range(8, 12))]


def test_nothing_to_replay_gives_no_run() -> None:
    assert list(runs([], 5, lambda n: None)) == []


def test_the_next_list_is_read_only_when_the_run_reaches_it() -> None:
    read: list[int] = []

    def lazily() -> Iterator[list[int]]:
        for number, items in enumerate(_lists([2, 2, 2])):
            read.append(number)
            yield items

    first = next(runs(lazily(), 100, lambda n: None))
    assert read == [0]  # only the first list, to know there is a run at all
    assert [next(first), next(first)] == [0, 1]
    assert read == [0]
    assert next(first) == 2
    assert read == [0, 1]
