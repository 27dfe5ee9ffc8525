"""``python -m bench.delta_tables``: a warehouse batch that spans several tables, MERGEd one at a time and two at once.

The Delta sink MERGEs each table a batch touches, and a MERGE is mostly a
fixed cost (~19 small Spark jobs one after the other), so a batch's time grew
with the number of tables it touched. ``delta_writers.each_table`` MERGEs
``TABLES_AT_ONCE`` tables at a time. This writes batches of ``--rows``
changes per table (inserts and updates of keys spread over 50,000, one row in
50 of 40 KB) through the sink's own ``write``: one sink MERGEs one table at a
time, the other two at once, each into tables of its own, alternating which
goes first, in one Spark session. It prints the median batch of each way and
their ratio, per table count. Local Spark only; no stack needed. Not a
pass/fail test.

Usage: python -m bench.delta_tables [--tables 2,4] [--rows 2000] [--batches 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from typing import Any

from bench.common import say

WAYS = {"one at a time": 1, "two at once": 2}


def batch(tables: int, rows: int, seed: int, version: int) -> list[Any]:
    from cdcsync.events import Change
    from cdcsync.sync.mapping import Row

    out = []
    for t in range(tables):
        for i in random.Random(seed * 100 + t).sample(range(50_000), rows):
            doc = {"n": i, "name": "x" * 40_000 if i % 50 == 0 else f"row {i}"}
            change = Change("bench", f"public.t{t}", "u", {"id": i}, doc, int(time.time() * 1000), version, "t", 0, 0)
            out.append(Row(change, f"t{t}", str(i), doc))
    return out


def run(spark: Any, tables: int, args: argparse.Namespace) -> dict[str, float]:
    from cdcsync.sync.mapping import TableMapping
    from cdcsync.sync.sinks.delta import DeltaSink

    mappings = [
        TableMapping(table=f"public.t{t}", target=f"t{t}", types={"n": "int", "name": "text"}) for t in range(tables)
    ]
    sinks = {}
    for way, at_once in WAYS.items():
        sinks[way] = DeltaSink("warehouse", spark, tempfile.mkdtemp(prefix="cdcsync-bench-tables-"))
        sinks[way].tables_at_once = at_once
        sinks[way].open(mappings)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for n in range(args.batches + 2):
        order = list(WAYS) if n % 2 == 0 else list(WAYS)[::-1]
        for way in order:
            rows = batch(tables, args.rows, n, n + 1)
            started = time.monotonic()
            sinks[way].write(n, rows)
            if n >= 2:  # the first two of each way warm the plans up
                times[way].append(time.monotonic() - started)
        if n >= 2:
            say(
                f"  {tables} tables, batch {n - 1}/{args.batches}: "
                + ", ".join(f"{w} {t[-1]:.2f} s" for w, t in times.items())
            )
    medians = {way: round(statistics.median(t), 2) for way, t in times.items()}
    return medians | {"ratio": round(medians["one at a time"] / medians["two at once"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="2,4", help="tables per batch, comma-separated: one run each")
    parser.add_argument("--rows", type=int, default=2000, help="changes per table per batch")
    parser.add_argument("--batches", type=int, default=10, help="batches timed per way")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-tables")
    results: dict[str, Any] = {}
    for tables in (int(t) for t in args.tables.split(",")):
        say(f"{tables} tables, {args.rows} changes each per batch, {args.batches} batches each way ...")
        results[f"{tables} tables"] = run(spark, tables, args)
    if args.json:
        print(json.dumps(results))
    else:
        for label, f in results.items():
            print(
                f"{label:>10}: median batch {f['one at a time']} s one table at a time, {f['two at once']} s two at "
                f"once ({f['ratio']}x as fast)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
