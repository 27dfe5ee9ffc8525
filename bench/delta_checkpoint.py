"""``python -m bench.delta_checkpoint``: warehouse MERGEs with Delta's log checkpoints inside them or beside them.

Delta writes a table's log checkpoint inside the commit whose version is a
multiple of ``delta.checkpointInterval`` (10 by default), and that MERGE
returns only once it is written. cdcsync's tables carry an interval of 1,000
and the Delta sink writes their checkpoints every 10 versions on a thread of
its own (``sync/sinks/delta_checkpoints.py``). This runs the sink's own
``write`` of ``--updates`` changes to earlier rows of a 50,000-row table, back to
back (a warehouse that is behind), into two tables: one with an interval of
10 set on it (the sink leaves an operator's interval alone: Delta's way), one
at cdcsync's default. The two take turns in blocks of ``--block`` MERGEs
(ABBA, so both see the same JVM warm-up), and it prints each way's median,
90th percentile and slowest MERGE, and the whole run's MERGEs per minute.
Local Spark only; no stack needed. Not a pass/fail test.

Usage: python -m bench.delta_checkpoint [--blocks 4] [--block 20] [--updates 4000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.common import say
from bench.delta_compaction import _Table

WAYS = ("inside", "beside")
WARM_UP = 10  # MERGEs not timed, into a third table: the first plans and the JIT's first compiles


def _quantile(times: list[float], q: float) -> float:
    return sorted(times)[min(len(times) - 1, int(q * len(times)))]


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    tables: dict[str, _Table] = {}
    for way in WAYS:
        table = tables[way] = _Table(spark)
        table.merge(0, table.rows(50_000, 0))
        if way == "inside":
            spark.sql(f"ALTER TABLE delta.`{table.path}/items` SET TBLPROPERTIES ('delta.checkpointInterval' = '10')")
            table.sink.open([table.mapping])  # opened again: it reads the interval it now has
    warm = _Table(spark)
    warm.merge(0, warm.rows(50_000, 0))
    for n in range(WARM_UP):
        warm.merge(n + 1, warm.rows(0, args.updates))
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    spent: dict[str, float] = dict.fromkeys(WAYS, 0.0)
    batch = 0
    for block in range(args.blocks):
        for way in WAYS if block % 2 == 0 else reversed(WAYS):
            table, started = tables[way], time.monotonic()
            for _ in range(args.block):
                batch += 1
                times[way].append(table.merge(batch, table.rows(0, args.updates)))
            table.sink._checkpoints.close()  # the last checkpoint written counts in its way's time
            spent[way] += time.monotonic() - started
            say(f"  block {block + 1} {way}: median {statistics.median(times[way][-args.block :]):.2f} s")
    out: dict[str, Any] = {}
    for way, t in times.items():
        out[way] = {
            "median_s": round(statistics.median(t), 2),
            "p90_s": round(_quantile(t, 0.9), 2),
            "max_s": round(max(t), 2),
            "merges_per_min": round(60 * len(t) / spent[way], 1),
        }
    out["p90_ratio"] = round(out["inside"]["p90_s"] / out["beside"]["p90_s"], 2)
    out["rate_ratio"] = round(out["beside"]["merges_per_min"] / out["inside"]["merges_per_min"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=4, help="blocks per way (ABBA order)")
    parser.add_argument("--block", type=int, default=20, help="MERGEs per block")
    parser.add_argument("--updates", type=int, default=4000, help="changes to earlier rows per MERGE")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-checkpoint")
    result = run(spark, args)
    if args.json:
        print(json.dumps(result))
    else:
        for way in WAYS:
            f = result[way]
            print(
                f"checkpoints {way} the MERGE: median {f['median_s']} s, p90 {f['p90_s']} s, slowest {f['max_s']} s, "
                f"{f['merges_per_min']} MERGEs a minute"
            )
        print(f"beside / inside: p90 {result['p90_ratio']}x as fast, {result['rate_ratio']}x the MERGEs a minute")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
