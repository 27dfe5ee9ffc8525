"""bench.freshness: the warm-up ends once the Spark JVM's JIT compilers have settled, not after a fixed time."""

from __future__ import annotations

from collections.abc import Iterator

from bench import cpu
from bench.freshness import JIT_WINDOW_S, WARM_UP_MIN_S, JitSettled


def _samples(jit_cores_per_window: list[float], step_s: float = 1.0) -> Iterator[cpu.Sample]:
    """Samples every ``step_s``, the compilers using each window's cores in turn (the last one after that)."""
    at, jit = 0.0, 0.0
    while True:
        window = min(int(at // JIT_WINDOW_S), len(jit_cores_per_window) - 1)
        yield {"spark jvm: jit": jit, "_at": at}
        jit += jit_cores_per_window[window] * step_s
        at += step_s


def _ends_after(jit_cores_per_window: list[float], settled: float = 0.1, limit_s: int = 3600) -> float | None:
    samples = _samples(jit_cores_per_window)
    until = JitSettled(settled, sample=lambda: next(samples))
    for second in range(1, limit_s):
        if until():
            return second
    return None


def test_the_warm_up_ends_with_the_first_quiet_minute_after_the_least() -> None:
    # compiling hard for five minutes, then quiet: ends at the end of the first quiet window
    assert _ends_after([0.4, 0.35, 0.3, 0.2, 0.15, 0.05]) == 6 * JIT_WINDOW_S


def test_a_quiet_start_still_warms_up_for_the_least() -> None:
    ended = _ends_after([0.01])
    assert ended is not None and WARM_UP_MIN_S <= ended < WARM_UP_MIN_S + JIT_WINDOW_S


def test_a_jvm_that_keeps_compiling_never_ends_it_early() -> None:
    assert _ends_after([0.4, 0.3, 0.2], limit_s=1200) is None


def test_the_last_window_is_kept_for_the_report() -> None:
    samples = _samples([0.25])
    until = JitSettled(0.1, sample=lambda: next(samples))
    while until.last is None:
        until()
    assert until.last == 0.25
