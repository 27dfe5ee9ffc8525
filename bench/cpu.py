"""CPU per part of the stack over a phase, read from ``/proc`` (Linux): who takes the machine's cores.

``sample()`` reads each process's user + system time and names it by its
command line (``PARTS``; the bench's own process is ``bench``); the Spark
JVM's threads are also split by name (``THREADS``: the JIT compilers, the
tasks, the garbage collector, the rest). ``cores(before, after)`` is the
difference in cores: 1.0 is one core busy for the whole window.
``budget`` turns those cores into CPU per change (or row) and the most this
machine could do at that cost, which tells a goal out of reach by waits
(the machine was idle part of the time) from one out of reach by CPU.
``JitSettled`` tells when the JVM's JIT compilers have quietened after its
start (``bench.freshness``'s warm-up).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# The first pattern a process's command line matches names it. The Spark JVM and the Python workers
# it forks carry "pyspark" in their paths; the SparkSubmit and daemon markers are checked first.
PARTS = (
    ("spark jvm", re.compile(r"org\.apache\.spark\.deploy\.SparkSubmit")),
    ("python workers", re.compile(r"pyspark[./]daemon|pyspark[./]worker")),
    ("cdcsync driver", re.compile(r"-m cdcsync .*\brun\b")),
    ("elasticsearch", re.compile(r"org\.elasticsearch")),
    ("connect", re.compile(r"ConnectDistributed")),
    ("kafka", re.compile(r"kafka\.Kafka\b")),
    ("postgres", re.compile(r"^postgres|/postgres\b")),
    ("mariadb", re.compile(r"mariadbd|mysqld")),
    ("redis", re.compile(r"redis-server")),
)
THREADS = (
    ("jit", re.compile(r"^C\d CompilerThre")),
    ("tasks", re.compile(r"^Executor task")),
    ("gc", re.compile(r"^(GC Thread|G1 )")),
)
Sample = dict[str, float]


SPAWNED = re.compile(r"from multiprocessing\.(spawn|forkserver) import")  # a bootstrap's replay processes


def part_of(cmdline: str, pid: int = 0) -> str:
    """The part of the stack a process is, by its NUL-separated command line; ``other`` if none."""
    if pid == os.getpid() or SPAWNED.search(cmdline.replace("\0", " ")):
        return "bench"
    text = cmdline.replace("\0", " ").strip()
    return next((name for name, pattern in PARTS if pattern.search(text)), "other")


def thread_of(name: str) -> str:
    return "spark jvm: " + next((part for part, pattern in THREADS if pattern.search(name)), "other")


def _ticks(stat: str, children: bool = False) -> tuple[str, int]:
    """(comm, utime + stime) from a ``/proc/.../stat`` line (comm may hold spaces and parentheses).

    ``children``: plus cutime + cstime, the time of the children it has
    reaped (the bench's: a bootstrap's replay processes, gone by the phase's end).
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    reaped = int(fields[13]) + int(fields[14]) if children else 0
    return stat[stat.index("(") + 1 : stat.rindex(")")], int(fields[11]) + int(fields[12]) + reaped


def sample() -> Sample:
    """Seconds of CPU so far per part, and per Spark JVM thread kind, with the time taken (``_at``)."""
    out: Counter[str] = Counter()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            part = part_of((entry / "cmdline").read_text(errors="replace"), int(entry.name))
            out[part] += _ticks((entry / "stat").read_text(), children=int(entry.name) == os.getpid())[1] / TICKS
            if part == "spark jvm":
                for task in (entry / "task").iterdir():
                    comm, ticks = _ticks((task / "stat").read_text())
                    out[thread_of(comm)] += ticks / TICKS
        except (OSError, ValueError):  # the process or thread ended while it was read
            continue
    return {**out, "_at": time.monotonic()}


def cores(before: Sample, after: Sample) -> dict[str, float]:
    """Cores each part used between two samples, busiest first (a part that started in between counts whole)."""
    window = after["_at"] - before["_at"]
    used = {k: (v - before.get(k, 0.0)) / window for k, v in after.items() if k != "_at"}
    return {k: round(v, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v >= 0.005}


def summary(used: dict[str, float]) -> str:
    """``spark jvm 1.18 (jit 0.54, tasks 0.23, ...), python workers 0.25, ...``: one line for a report."""
    threads = [f"{k.split(': ', 1)[1]} {v}" for k, v in used.items() if k.startswith("spark jvm: ")]
    parts = []
    for name, value in used.items():
        if name.startswith("spark jvm: "):
            continue
        parts.append(f"{name} {value}" + (f" ({', '.join(threads)})" if name == "spark jvm" and threads else ""))
    return ", ".join(parts)


def budget(used: dict[str, float], seconds: float, units: int, machine: int | None = None) -> dict[str, Any]:
    """What ``units`` (changes, rows) cost the machine over a phase of ``seconds`` in which each part used ``used``.

    ``us_per_unit``: microseconds of CPU per unit, per part of the stack
    (``other`` processes and the Spark JVM's thread kinds left out: they are
    not the stack, or already in its JVM). ``busy``: the share of the
    machine's ``machine`` cores every process used. ``bound_per_s``: units/s
    with every core busy at that CPU per unit; the phase's own rate is
    ``bound_per_s * busy`` when nothing else ran. A goal above the bound needs
    less CPU per unit; one below it needs fewer waits.
    """
    cores = machine or os.cpu_count() or 1
    stack = {k: v for k, v in used.items() if k != "other" and not k.startswith("spark jvm: ")}
    per_unit = {k: round(v * seconds / units * 1e6, 1) for k, v in stack.items()}
    total_us = sum(stack.values()) * seconds / units * 1e6
    return {
        "us_per_unit": per_unit,
        "us_total": round(total_us, 1),
        "busy": round(sum(v for k, v in used.items() if not k.startswith("spark jvm: ")) / cores, 2),
        "bound_per_s": round(cores / total_us * 1e6) if total_us else 0,
    }


def budget_line(figures: dict[str, Any], unit: str) -> str:
    """``cpu per change (us): python workers 23.1, redis 11.0; 34.1 in all; machine busy 0.86; bound 58,651/s``."""
    parts = ", ".join(f"{k} {v}" for k, v in figures["us_per_unit"].items())
    return (
        f"cpu per {unit} (us): {parts}; {figures['us_total']} in all; machine busy {figures['busy']}; "
        f"bound {figures['bound_per_s']:,}/s"
    )


class JitSettled:
    """True once a window of ``window_s``, at least ``least_s`` in, had the Spark JVM's compilers below ``below`` cores.

    Asked often (each second); ``/proc`` is read (``sample``) only once a window has passed. ``last`` holds the
    compilers' cores in the last whole window, for the report.
    """

    def __init__(
        self,
        below: float,
        least_s: float,
        window_s: float = 60,
        sample: Callable[[], Sample] = sample,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.below, self.least_s, self.window_s, self.sample, self.clock = below, least_s, window_s, sample, clock
        self.window = sample()
        self.started = self.window["_at"]
        self.last: float | None = None

    def __call__(self) -> bool:
        if self.clock() - self.window["_at"] < self.window_s:
            return False
        now = self.sample()
        self.last = cores(self.window, now).get("spark jvm: jit", 0.0)
        self.window = now
        return now["_at"] - self.started >= self.least_s and self.last < self.below
