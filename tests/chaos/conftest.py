"""Chaos tests need the real stack; the kill matrix's results are printed as one table at the end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class Recovery:
    """One row of the kill matrix: seconds from the component's return (or the daemon's new start) to each step."""

    row: str
    capture_s: float | None  # both sources' table topics growing again
    followers: dict[str, tuple[float | None, float | None]]  # follower -> (first batch that applied rows, clean verify)
    changes: int


RESULTS: list[Recovery] = []


@pytest.fixture(autouse=True)
def _needs_stack(stack_up: None) -> None:
    """Every test here talks to the real local stack."""


def seconds(figure: float | None) -> str:
    return "-" if figure is None else f"{figure:.0f}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    followers = next((list(r.followers) for r in RESULTS if r.followers), [])
    write = terminalreporter.write_line
    write("")
    write("kill -9 matrix: seconds from the component's return to capture producing, and per follower to its")
    write("first applied batch / its first clean `cdcsync verify` (- = not seen)")
    write(f"{'fault':<24}{'capture':>9}" + "".join(f"{f:>14}" for f in followers) + f"{'changes':>10}")
    for r in RESULTS:
        figures = [r.followers.get(f, (None, None)) for f in followers]
        cells = "".join(f"{seconds(b) + ' / ' + seconds(v):>14}" for b, v in figures)
        write(f"{r.row:<24}{seconds(r.capture_s):>9}{cells}{r.changes:>10}")
