"""``python -m bench.verify_pace``: what the daemon's background verify costs the machine at its pace.

A Postgres table of ``--rows`` narrow rows is made and each store of
``--sinks`` filled with it (as ``bench.verify_memory`` does). Then, per
store, the machine's CPU (``bench.cpu``: this process, which runs the pass,
and every server it reads) is sampled over ``--idle`` seconds with nothing
running, then over one background pass (``sync.verify.verify_follower``
with ``pace``, as ``sync.verify.background`` runs it) at ``--pace`` rows a
second. Printed: the cores each part used during the pass, less the idle
baseline of the same run, against the goal of 5 % of a core. Not a pass/fail
test. Usage: python -m bench.verify_pace [--rows 60000] [--pace 800] [--sinks search,cache] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench import cpu
from bench.common import say
from bench.verify_memory import narrow_table

GOAL_CORES = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.verify_pace", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=60_000, help="rows of the table")
    parser.add_argument("--pace", type=float, default=800, help="rows a second on each side (verify.rows_per_s)")
    parser.add_argument("--sinks", default="search,cache", help="followers: search (Elasticsearch), cache (Redis)")
    parser.add_argument("--idle", type=float, default=20, help="seconds of the idle baseline")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    args = parser.parse_args()
    results = [measure(args.rows, args.pace, sink, args.idle) for sink in args.sinks.split(",")]
    for r in results:
        say(
            f"verify pass {r['sink']:<6} {r['rows']:,} rows at {r['pace']:,.0f} rows/s: {r['seconds']:.0f} s, "
            f"{r['cores']:.3f} cores over the idle baseline ({r['idle_cores']:.3f}), goal {GOAL_CORES}: "
            f"x{r['cores'] / GOAL_CORES:.2f} of it; by part {r['by_part']}; clean={r['clean']}"
        )
    if args.json:
        print(json.dumps(results, indent=2))


def measure(rows: int, pace: float, sink_name: str, idle_s: float) -> dict[str, Any]:
    from cdcsync.sync.sinks import build_sink
    from cdcsync.sync.verify.compare import verify_follower

    with narrow_table(rows, sink_name) as (_path, config):
        follower = config.followers[0]
        sink = build_sink(config, follower, None)
        say(f"{sink_name}: {idle_s:.0f} s idle, then a pass at {pace:,.0f} rows/s ...")
        time.sleep(5)  # the fill's last writes settle
        before_idle = cpu.sample()
        time.sleep(idle_s)
        idle = cpu.cores(before_idle, cpu.sample())
        before = cpu.sample()
        started = time.monotonic()
        (report,) = verify_follower(config, follower, sink, pace=pace)  # the table, and no other
        seconds = time.monotonic() - started
        used = cpu.cores(before, cpu.sample())
        sink.close()
    parts = sorted({*used, *idle} - {k for k in used if k.startswith("spark jvm: ")})
    over = {p: round(used.get(p, 0.0) - idle.get(p, 0.0), 3) for p in parts}
    return {
        "sink": sink_name,
        "rows": rows,
        "pace": pace,
        "seconds": round(seconds, 1),
        "cores": round(sum(v for v in over.values() if v > 0), 3),
        "idle_cores": round(sum(idle.get(p, 0.0) for p in parts), 3),
        "by_part": {p: v for p, v in over.items() if v >= 0.005},
        "clean": report.clean,
    }


if __name__ == "__main__":
    main()
