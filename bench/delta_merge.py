"""``python -m bench.delta_merge``: the warehouse's MERGE of wide rows, with deletion vectors off and on.

A follower's batch of changes to keys spread over a Delta table touches
nearly every file of it. Without deletion vectors a MERGE rewrites each
touched file whole (every row of it, changed or not); with them it writes
the changed rows and a small bitmap of the rows they replace. This measures
both in one run, on the same rows: seconds per MERGE, bytes written per
MERGE, and the table's size on disk afterwards (Delta keeps replaced files
until VACUUM). Local Spark only; no stack needed. Not a pass/fail test.

Usage: python -m bench.delta_merge [--rows N] [--row-kb K] [--batch B] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import say

MIB = 2**20


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure(spark: Any, base: Path, args: argparse.Namespace, deletion_vectors: bool) -> dict[str, Any]:
    from delta.tables import DeltaTable

    def rows(ids: list[int], version: int) -> Any:  # incompressible text: hex of random bytes
        data = [(i, os.urandom(args.row_kb * 512).hex(), version) for i in ids]
        return spark.createDataFrame(data, "id long, body string, v long")

    path = base / ("dv" if deletion_vectors else "rewrite")
    shutil.rmtree(path, ignore_errors=True)
    writer = rows(list(range(args.rows)), 1).write.format("delta")
    writer.option("delta.enableDeletionVectors", str(deletion_vectors).lower()).save(str(path))
    initial = _size(path)
    table = DeltaTable.forPath(spark, str(path))
    seconds, written = [], []
    for n in range(args.rounds):
        changed = rows(random.Random(n).sample(range(args.rows), args.batch), n + 2).cache()
        changed.count()  # built before the clock starts: the MERGE alone is measured
        before, started = _size(path), time.monotonic()
        (
            table.alias("t")
            .merge(changed.alias("s"), "t.id = s.id")
            .whenMatchedUpdate(condition="s.v > t.v", set={"body": "s.body", "v": "s.v"})
            .whenNotMatchedInsertAll()
            .execute()
        )
        seconds.append(time.monotonic() - started)
        written.append(_size(path) - before)
        changed.unpersist()
        say(f"  deletion_vectors={deletion_vectors} merge {n + 1}/{args.rounds}: {seconds[-1]:.2f}s")
    assert spark.read.format("delta").load(str(path)).count() == args.rows
    return {
        "deletion_vectors": deletion_vectors,
        "merge_s_median": round(statistics.median(seconds), 2),
        "merge_s_max": round(max(seconds), 2),
        "written_mib_per_merge": round(statistics.median(written) / MIB, 1),
        "table_mib_before": round(initial / MIB, 1),
        "table_mib_after": round(_size(path) / MIB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000, help="rows in the table")
    parser.add_argument("--row-kb", type=int, default=60, help="size of each row's text")
    parser.add_argument("--batch", type=int, default=270, help="changed rows per MERGE (a 16 MiB batch of 60 KB rows)")
    parser.add_argument("--rounds", type=int, default=8, help="MERGEs per setting")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-merge")
    base = Path(tempfile.mkdtemp(prefix="cdcsync-bench-delta-"))
    try:
        say(f"{args.rows:,} rows of {args.row_kb} KB; {args.rounds} MERGEs of {args.batch} scattered rows each")
        results = [measure(spark, base, args, dv) for dv in (False, True)]
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    rewrite, dv = results
    ratios = {
        "written_ratio": round(rewrite["written_mib_per_merge"] / max(dv["written_mib_per_merge"], 0.1), 1),
        "time_ratio": round(rewrite["merge_s_median"] / max(dv["merge_s_median"], 0.01), 2),
    }
    if args.json:
        print(json.dumps({"results": results, **ratios}, indent=2))
        return
    print(f"{'deletion vectors':<18}{'MERGE s (median/max)':>22}{'written MiB/MERGE':>20}{'table MiB after':>17}")
    for r in results:
        print(
            f"{'on' if r['deletion_vectors'] else 'off (rewrite)':<18}"
            f"{r['merge_s_median']:>12.2f} / {r['merge_s_max']:<7.2f}"
            f"{r['written_mib_per_merge']:>20.1f}{r['table_mib_after']:>17.1f}"
        )
    print(f"bytes written per MERGE: {ratios['written_ratio']}x less with deletion vectors; "
          f"time per MERGE ratio (off/on) {ratios['time_ratio']}")  # fmt: skip


if __name__ == "__main__":
    main()
