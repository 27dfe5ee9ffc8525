"""Chaos tests need the real stack; the kill matrix's results are printed as one table at the end."""

from __future__ import annotations

from typing import Any

import pytest

# (row, {follower: seconds from the restart to a clean verify, or None}, changes written)
RESULTS: list[tuple[str, dict[str, float | None], int]] = []


@pytest.fixture(autouse=True)
def _needs_stack(stack_up: None) -> None:
    """Every test here talks to the real local stack."""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    followers = list(RESULTS[0][1])
    write = terminalreporter.write_line
    write("")
    write("kill -9 matrix: seconds from the restart to a clean `cdcsync verify` (- = did not converge)")
    write(f"{'fault':<24}" + "".join(f"{f:>12}" for f in followers) + f"{'changes':>10}")
    for row, converged, changes in RESULTS:
        cells = "".join(f"{'-' if converged[f] is None else f'{converged[f]:.0f} s':>12}" for f in followers)
        write(f"{row:<24}{cells}{changes:>10}")
