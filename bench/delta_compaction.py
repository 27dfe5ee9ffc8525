"""``python -m bench.delta_compaction``: a warehouse table that keeps gaining rows, with auto compaction off and on.

Each MERGE of the Delta sink writes its rows to new files, and Delta drops a
file only once every row of it is replaced; a table that gains rows keeps
them all, and each MERGE reads them all. This runs the sink's own ``write``
(``--inserts`` new rows and ``--updates`` updates of earlier ones per MERGE,
narrow rows) ``--merges`` times into a fresh table with
``spark.databricks.delta.autoCompact.enabled`` off, then on, in one Spark
session, and prints per window of 25 MERGEs the table's live files, its
size and the median MERGE. The second run has a warmer JVM than the first:
compare the file counts there, and take the time a file costs from the next
part.

``--files 50,2000,8000`` adds a second part: a table of 50,000 rows rewritten
into N files, then ten such MERGEs into it (compaction off), the median
MERGE by N and its ratio to the first N's; then one MERGE with compaction
on, which compacts the table whatever its count (a table's first
compaction in a process): what a daemon's first MERGE costs after a start. Local Spark only; no stack needed.
Not a pass/fail test.

Usage: python -m bench.delta_compaction [--merges 150] [--inserts 700] [--updates 300] [--files N,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import say

WINDOW = 25
AUTO_COMPACT = "spark.databricks.delta.autoCompact.enabled"


def _row(doc_id: str, version: int, name: str) -> Any:
    from cdcsync.events import Change
    from cdcsync.sync.mapping import Row

    change = Change("bench", "public.items", "u", {"id": doc_id}, None, 1_709_207_130_123, version, "t", 0, version)
    return Row(change, "items", doc_id, {"n": version, "name": name})


class _Table:
    """One fresh table written by the Delta sink, with the ids it holds and the next version.

    Each row's ``name`` is 200 characters, or random text of ``row_kb`` KB (the same in every row).
    """

    def __init__(self, spark: Any, row_kb: int = 0) -> None:
        from cdcsync.sync.mapping import TableMapping
        from cdcsync.sync.sinks.delta import DeltaSink

        self.spark, self.path = spark, tempfile.mkdtemp(prefix="cdcsync-bench-compaction-")
        self.sink = DeltaSink("warehouse", spark, self.path)
        self.mapping = TableMapping(table="public.items", target="items", types={"n": "int", "name": "text"})
        self.sink.open([self.mapping])
        self.ids: list[str] = []
        self.version = 0
        self.name = os.urandom(row_kb * 512).hex() if row_kb else "x" * 200

    def rows(self, inserts: int, updates: int) -> list[Any]:
        new = [uuid.uuid4().hex for _ in range(inserts)]
        old = random.sample(self.ids, min(updates, len(self.ids)))
        self.ids.extend(new)
        out = []
        for doc_id in new + old:
            self.version += 1
            out.append(_row(doc_id, self.version, self.name))
        return out

    def merge(self, batch_id: int, rows: list[Any]) -> float:
        started = time.monotonic()
        self.sink.write(batch_id, rows)
        return time.monotonic() - started

    def detail(self) -> tuple[int, float]:
        from delta.tables import DeltaTable

        row = DeltaTable.forPath(self.spark, f"{self.path}/items").detail().collect()[0]
        return int(row["numFiles"]), row["sizeInBytes"] / 2**20


def by_row_width(spark: Any, row_kb: int, measure: Callable[[_Table, int], dict[str, Any]]) -> dict[str, Any]:
    """``measure(table, share)`` on narrow rows, then on rows of ``row_kb`` KB; the figures by row width.

    Narrow: a 50,000-row table and ``share`` 1. Wide: a 5,000-row table and ``share`` 4, a quarter of the
    changes per MERGE (the batches of the first wide-row benches, bound to 16 MiB).
    """
    results: dict[str, Any] = {}
    for kb in (0, row_kb):
        label, initial, share = (f"{kb} KB rows", 5_000, 4) if kb else ("narrow rows", 50_000, 1)
        table = _Table(spark, kb)
        table.merge(0, table.rows(initial, 0))
        say(f"{label}: a {initial:,}-row table ...")
        results[label] = measure(table, share)
        say(f"  {results[label]}")
    return results


def growth(spark: Any, args: argparse.Namespace, compact: bool) -> list[dict[str, Any]]:
    spark.conf.set(AUTO_COMPACT, "true" if compact else "false")
    table, times, windows = _Table(spark), [], []
    for batch in range(args.merges):
        times.append(table.merge(batch, table.rows(args.inserts, args.updates)))
        if (batch + 1) % WINDOW == 0:
            files, mib = table.detail()
            window = {"merges": batch + 1, "files": files, "mib": round(mib, 1)}
            window["median_s"] = round(statistics.median(times[-WINDOW:]), 2)
            windows.append(window)
            say(f"  auto compaction {'on ' if compact else 'off'}: {window}")
    return windows


def by_files(spark: Any, files: int, args: argparse.Namespace) -> dict[str, float]:
    """Median MERGE into a 50,000-row table in ``files`` files, then the first MERGE with compaction on.

    Delta compacts a table at its first write in a process whatever its file
    count (docs/performance.md): the second figure is that one-off, what a
    daemon's first MERGE into such a table costs after a start.
    """
    spark.conf.set(AUTO_COMPACT, "false")
    table = _Table(spark)
    table.merge(0, table.rows(50_000, 0))
    path = f"{table.path}/items"
    spark.read.format("delta").load(path).repartition(files).write.format("delta").mode("overwrite").save(path)
    times = [table.merge(i + 1, table.rows(args.inserts, args.updates)) for i in range(12)]
    median = round(statistics.median(times[2:]), 2)  # the first two warm the plan
    spark.conf.set(AUTO_COMPACT, "true")
    first = table.merge(13, table.rows(args.inserts, args.updates))
    after, _ = table.detail()
    return {"median_s": median, "first_compacting_s": round(first, 2), "files_after": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--merges", type=int, default=150, help="MERGEs per setting")
    parser.add_argument("--inserts", type=int, default=700, help="new rows per MERGE")
    parser.add_argument("--updates", type=int, default=300, help="updates of earlier rows per MERGE")
    parser.add_argument("--files", default="", help="also: MERGE time into a table of N files, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-compaction")
    results: dict[str, Any] = {}
    for compact in (False, True):
        say(f"{args.merges} MERGEs of {args.inserts} new rows and {args.updates} updates, auto compaction {compact}")
        results["on" if compact else "off"] = growth(spark, args, compact)
    for files in [int(f) for f in args.files.split(",") if f]:
        say(f"a 50,000-row table in {files} files ...")
        results.setdefault("by_files", {})[files] = by_files(spark, files, args)
        say(f"  {results['by_files'][files]}")

    if args.json:
        print(json.dumps(results))
    else:
        heads = ("MERGEs", "files off", "MiB off", "median s off", "files on", "MiB on", "median s on")
        print("  ".join(f"{h:>12}" for h in heads))
        for off, on in zip(results["off"], results["on"], strict=True):
            cells = (off["merges"], off["files"], off["mib"], off["median_s"], on["files"], on["mib"], on["median_s"])
            print("  ".join(f"{c:>12}" for c in cells))
        by_files_s = results.get("by_files", {})
        first = next(iter(by_files_s.values()), {})
        for files, figures in by_files_s.items():
            ratio = figures["median_s"] / first["median_s"]
            print(
                f"table in {files:>6} files: median MERGE {figures['median_s']} s ({ratio:.2f}x the first); "
                f"first MERGE with compaction {figures['first_compacting_s']} s, {figures['files_after']} files after"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
