"""bench.cpu.budget: CPU per change (or row) across the stack, and the machine's bound at that cost."""

from __future__ import annotations

from bench.cpu import budget, budget_line


def test_cpu_per_unit_by_part_and_in_all() -> None:
    # 10 s, 100,000 changes: one core of Python workers is 100 us a change, half a core of Redis 50.
    figures = budget({"python workers": 1.0, "redis": 0.5}, seconds=10, units=100_000, machine=2)
    assert figures["us_per_unit"] == {"python workers": 100.0, "redis": 50.0}
    assert figures["us_total"] == 150.0
    assert figures["busy"] == 0.75
    # Two cores at 150 us a change: 13,333 changes/s; the phase itself did 10,000 (busy 0.75 of that).
    assert figures["bound_per_s"] == 13_333


def test_the_jvm_threads_and_other_processes_are_not_the_stack() -> None:
    used = {"spark jvm": 0.8, "spark jvm: jit": 0.5, "spark jvm: tasks": 0.3, "other": 0.4}
    figures = budget(used, seconds=1, units=1_000, machine=2)
    assert figures["us_per_unit"] == {"spark jvm": 800.0}  # the JVM's threads are already in it
    assert figures["us_total"] == 800.0
    assert figures["busy"] == 0.6  # the machine was busy with the other process too
    assert figures["bound_per_s"] == 2_500


def test_the_bound_is_the_rate_at_every_core_busy() -> None:
    # A phase that ran at 20,000/s with the machine 0.8 busy could reach 25,000/s at the same cost per unit.
    figures = budget({"bench": 1.6}, seconds=5, units=100_000, machine=2)
    assert figures["bound_per_s"] == 25_000
    assert round(figures["bound_per_s"] * figures["busy"]) == 100_000 // 5


def test_nothing_used_has_no_bound() -> None:
    nothing = {"us_per_unit": {}, "us_total": 0.0, "busy": 0.0, "bound_per_s": 0}
    assert budget({}, seconds=1, units=10, machine=2) == nothing


def test_one_line_for_a_report() -> None:
    line = budget_line(budget({"redis": 0.5, "python workers": 1.0}, 10, 100_000, machine=2), "change")
    assert line == (
        "cpu per change (us): redis 50.0, python workers 100.0; 150.0 in all; machine busy 0.75; bound 13,333/s"
    )
