"""The key ranges ``bootstrap --from source`` splits an integer-keyed table into: every key in exactly one."""

from __future__ import annotations

import re

import pytest

from cdcsync.config import SourceConfig
from cdcsync.snapshot.jdbc import range_predicates


def _holds(predicate: str, value: int) -> bool:
    clauses = predicate.split(" AND ")
    for clause in clauses:
        match = re.fullmatch(r'"id" (<|>=) (-?\d+)', clause)
        if clause == "1 = 1":
            continue
        assert match, clause
        op, bound = match.group(1), int(match.group(2))
        if (op == "<" and not value < bound) or (op == ">=" and not value >= bound):
            return False
    return True


@pytest.mark.parametrize(
    ("low", "high", "pieces"), [(1, 200_000, 8), (1, 5, 8), (-50, 50, 3), (7, 7, 2), (1, 100, 1), (1, 10**12, 40)]
)
def test_every_key_falls_in_exactly_one_range(low: int, high: int, pieces: int) -> None:
    source = SourceConfig(
        name="pg", kind="postgres", port=5432, database="d", user="u", password="x", tables=["public.t"]
    )
    predicates = range_predicates(source, "id", (low, high), pieces)
    assert 1 <= len(predicates) <= pieces
    probes = {low, high, low - 1, high + 1, (low + high) // 2}
    probes |= {int(b) + d for p in predicates for b in re.findall(r"-?\d+", p) for d in (-1, 0, 1)}
    for value in probes:
        assert sum(_holds(p, value) for p in predicates) == 1, (value, predicates)
