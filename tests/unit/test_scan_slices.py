"""elasticsearch_reads._at_once: the pages of several slices read at once, each page once, errors and early ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cdcsync.sync.sinks.elasticsearch_reads import _at_once


def part(name: str, pages: int, pause_s: float = 0.0) -> Iterator[list[dict[str, Any]]]:
    for n in range(pages):
        time.sleep(pause_s)
        yield [{"_id": f"{name}{n}-{i}"} for i in range(3)]


def test_every_page_of_every_slice_comes_once() -> None:
    got = [hit["_id"] for hits in _at_once([part("a", 5), part("b", 7, 0.001), part("c", 0)]) for hit in hits]
    assert len(got) == len(set(got)) == 3 * 12
    assert {i[0] for i in got} == {"a", "b"}


def test_a_slice_that_fails_fails_the_scan() -> None:
    def failing() -> Iterator[list[dict[str, Any]]]:
        yield [{"_id": "x"}]
        raise ConnectionError("elasticsearch went away")

    with pytest.raises(ConnectionError, match="went away"):
        for _hits in _at_once([part("a", 1000, 0.001), failing()]):
            pass


def test_a_scan_closed_early_leaves_no_slice_reading() -> None:
    before = threading.active_count()
    pages = _at_once([part("a", 10_000), part("b", 10_000)])
    next(pages)
    pages.close()
    assert threading.active_count() == before
