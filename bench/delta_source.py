"""``python -m bench.delta_source``: the warehouse MERGE with its source built three ways.

The Delta sink hands each MERGE its batch as a DataFrame. Built with
``createDataFrame`` of Python tuples (``tuples``), that is an RDD of pickles
which Python tasks convert each time a plan reads it; built from an Arrow
table (``slots``), a local relation the JVM reads alone, split into a
partition per task slot; ``delta_values.frame`` (``one``) is that in one
partition, the sink's way. This runs the sink's own ``write`` into one
50,000-row table, MERGEs of ``--inserts`` new rows and ``--updates`` updates,
taking the three ways in turn so that each sees the same JVM warm-up and
table growth, for narrow rows (a 50,000-row table) and for rows of
``--row-kb`` KB (one random text in every row; a 5,000-row table, a quarter
of the rows per MERGE). It prints the median MERGE of each way and its ratio
to ``one``.
Local Spark only; no stack needed. Not a pass/fail test.

Usage: python -m bench.delta_source [--merges 16] [--inserts 700] [--updates 300] [--row-kb 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from typing import Any

from bench.delta_compaction import _Table, by_row_width


def tuples(spark: Any, data: list[tuple[Any, ...]], schema: Any) -> Any:
    """The way before Arrow: Python tuples, pickled."""
    return spark.createDataFrame(data, schema)


def slots(spark: Any, data: list[tuple[Any, ...]], schema: Any) -> Any:
    """The way before one partition: from Arrow, a partition per task slot."""
    from cdcsync.sync.sinks.delta_values import arrow_table

    return spark.createDataFrame(arrow_table(data, schema), schema)


def run(args: argparse.Namespace, table: _Table, share: int) -> dict[str, float]:
    from cdcsync.sync.sinks import delta, delta_values

    ways = {"tuples": tuples, "slots": slots, "one": delta_values.frame}
    times: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for n in range(len(ways) * (args.merges + 2)):
            way = list(ways)[n % len(ways)]
            delta.frame = ways[way]  # type: ignore[attr-defined]
            changes = table.rows(args.inserts // share, args.updates // share)
            started = time.monotonic()
            table.sink.write(n + 1, changes)
            if n >= 2 * len(ways):  # the first two of each way warm the plan
                times[way].append(time.monotonic() - started)
    finally:
        delta.frame = delta_values.frame  # type: ignore[attr-defined]
    medians = {way: round(statistics.median(t), 2) for way, t in times.items()}
    return medians | {f"{way}_ratio": round(medians[way] / medians["one"], 2) for way in ("tuples", "slots")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--merges", type=int, default=16, help="MERGEs timed per way and row width")
    parser.add_argument("--inserts", type=int, default=700, help="new rows per MERGE")
    parser.add_argument("--updates", type=int, default=300, help="updates of earlier rows per MERGE")
    parser.add_argument("--row-kb", type=int, default=20, help="the wide rows' size")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-source")
    results = by_row_width(spark, args.row_kb, partial(run, args))
    if args.json:
        print(json.dumps(results))
    else:
        for label, figures in results.items():
            print(
                f"{label:>14}: median MERGE {figures['tuples']} s from tuples, {figures['slots']} s from Arrow in a "
                f"partition per slot, {figures['one']} s from Arrow in one partition (the sink's); one partition "
                f"{figures['tuples_ratio']}x / {figures['slots_ratio']}x as fast"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
