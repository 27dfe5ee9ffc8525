"""``python -m bench.delta_adaptive``: the warehouse MERGE with Spark's adaptive execution on and off.

Adaptive query execution runs each shuffle stage of a plan as a Spark job of
its own and plans the rest again between them. A warehouse MERGE is a chain
of small joins, so that is several more jobs per MERGE, each with its own
scheduling. This runs the Delta sink's own ``write`` of ``--updates`` changes to
earlier rows into one table (narrow rows in a 50,000-row table, then rows of
``--row-kb`` KB in a 5,000-row one with a quarter of the changes: the warehouse's batches are bound to
16 MiB), alternating the setting from one MERGE to the next in one Spark
session so that both see the same JVM warm-up and table, and prints the
median MERGE and Spark jobs per MERGE of each way. cdcsync turns it off
(``cdcsync.spark``). Local Spark only; no stack needed. Not a pass/fail test.

Usage: python -m bench.delta_adaptive [--merges 20] [--updates 4000] [--row-kb 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from typing import Any

from bench.delta_compaction import _Table, by_row_width

ADAPTIVE = "spark.sql.adaptive.enabled"
WARM_UP = 4  # MERGEs not timed, two of each way: the first plans and the JIT's first compiles


def run(spark: Any, args: argparse.Namespace, table: _Table, share: int) -> dict[str, Any]:
    tracker = spark.sparkContext.statusTracker()
    times: dict[str, list[float]] = {"on": [], "off": []}
    jobs: dict[str, list[int]] = {"on": [], "off": []}
    try:
        for n in range(2 * args.merges + WARM_UP):
            way = ("on", "off")[n % 2]
            spark.conf.set(ADAPTIVE, "true" if way == "on" else "false")
            group = f"bench-adaptive-{share}-{n}"
            spark.sparkContext.setJobGroup(group, group)
            changes = table.rows(0, args.updates // share)
            started = time.monotonic()
            table.sink.write(n + 1, changes)
            if n >= WARM_UP:
                times[way].append(time.monotonic() - started)
                jobs[way].append(len(tracker.getJobIdsForGroup(group)))
    finally:
        spark.conf.unset(ADAPTIVE)
        spark.sparkContext.setJobGroup("", "")
    out: dict[str, Any] = {way: round(statistics.median(t), 2) for way, t in times.items()}
    out |= {f"jobs_{way}": statistics.median(j) for way, j in jobs.items()}
    return out | {"ratio": round(out["on"] / out["off"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--merges", type=int, default=20, help="MERGEs timed per way and row width")
    parser.add_argument("--updates", type=int, default=4000, help="changes to earlier rows per MERGE (narrow rows)")
    parser.add_argument("--row-kb", type=int, default=20, help="the wide rows' size")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-adaptive")
    results = by_row_width(spark, args.row_kb, partial(run, spark, args))
    if args.json:
        print(json.dumps(results))
    else:
        for label, f in results.items():
            print(
                f"{label:>14}: median MERGE {f['on']} s adaptive ({f['jobs_on']} jobs), {f['off']} s not "
                f"({f['jobs_off']} jobs): {f['ratio']}x as fast without"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
