"""bench.cpu.JitSettled: bench.freshness's warm-up ends once the Spark JVM's JIT compilers have settled."""

from __future__ import annotations

from bench import cpu
from bench.cpu import JitSettled
from bench.freshness import WARM_UP_MIN_S

JIT_WINDOW_S = 60


class _Jvm:
    """A clock and ``/proc`` samples of a JVM whose compilers use each window's cores in turn (then the last)."""

    def __init__(self, jit_cores_per_window: list[float]) -> None:
        self.per_window, self.at, self.jit, self.samples = jit_cores_per_window, 0.0, 0.0, 0

    def tick(self) -> None:
        window = min(int(self.at // JIT_WINDOW_S), len(self.per_window) - 1)
        self.jit += self.per_window[window]
        self.at += 1.0

    def clock(self) -> float:
        return self.at

    def sample(self) -> cpu.Sample:
        self.samples += 1
        return {"spark jvm: jit": self.jit, "_at": self.at}


def _ends_after(jit_cores_per_window: list[float], settled: float = 0.1, limit_s: int = 3600) -> float | None:
    jvm = _Jvm(jit_cores_per_window)
    until = JitSettled(settled, WARM_UP_MIN_S, JIT_WINDOW_S, sample=jvm.sample, clock=jvm.clock)
    for _ in range(limit_s):
        jvm.tick()
        if until():
            return jvm.at
    return None


def test_the_warm_up_ends_with_the_first_quiet_minute_after_the_least() -> None:
    # compiling hard for five minutes, then quiet: ends at the end of the first quiet window
    assert _ends_after([0.4, 0.35, 0.3, 0.2, 0.15, 0.05]) == 6 * JIT_WINDOW_S


def test_a_quiet_start_still_warms_up_for_the_least() -> None:
    ended = _ends_after([0.01])
    assert ended is not None and WARM_UP_MIN_S <= ended < WARM_UP_MIN_S + JIT_WINDOW_S


def test_a_jvm_that_keeps_compiling_never_ends_it_early() -> None:
    assert _ends_after([0.4, 0.3, 0.2], limit_s=1200) is None


def test_proc_is_read_once_a_window_and_the_last_window_is_kept_for_the_report() -> None:
    jvm = _Jvm([0.25])
    until = JitSettled(0.1, WARM_UP_MIN_S, JIT_WINDOW_S, sample=jvm.sample, clock=jvm.clock)
    for _ in range(3 * JIT_WINDOW_S):
        jvm.tick()
        until()
    assert until.last == 0.25
    assert jvm.samples == 1 + 3  # the first, then one per window
