"""``python -m bench.delta_upkeep``: a warehouse table's disk under steady updates, with and without the upkeep.

Two copies of one table take the same MERGEs of scattered updates, the way
the daemon applies a follower's batches (deletion vectors on, auto compaction
on, replaced files' entries kept an hour: cdcsync's session). One is left as
the MERGEs leave it; the other gets the daemon's upkeep pass
(``sync.delta_upkeep.tidy``: OPTIMIZE, then VACUUM LITE) every ``--upkeep-every``
MERGEs. Time is compressed: the run's MERGEs stand for hours of changes, so
the retention window is compressed with it to 0 hours (everything a commit
replaced before the pass may go), the floor a real window adds to.

Printed per checkpoint of the run: bytes on disk over bytes of live data for
both copies, the files of each, and the upkeep's seconds; at the end, the
bytes one change adds to disk, and the ratio a real window of
``--retention-hours`` at ``--rate`` changes/s would settle at on this table
(live + what the window keeps, over live). Local Spark only; no stack needed.

Usage: python -m bench.delta_upkeep [--rows N] [--batch B] [--merges M] [--upkeep-every K] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import say

MIB = 2**20


def detail(spark: Any, path: str) -> tuple[int, int]:
    row = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").select("numFiles", "sizeInBytes").collect()[0]
    return int(row[0]), int(row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the table (narrow: id, 64-char text, v)")
    parser.add_argument("--batch", type=int, default=5000, help="changed rows per MERGE (~5 s of 1k changes/s)")
    parser.add_argument("--merges", type=int, default=120, help="MERGEs in the run")
    parser.add_argument("--upkeep-every", type=int, default=20, help="MERGEs between upkeep passes")
    parser.add_argument("--retention-hours", type=int, default=168, help="the window the projection assumes")
    parser.add_argument("--rate", type=float, default=1000.0, help="changes/s the projection assumes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()

    from cdcsync.spark import spark_session
    from cdcsync.sync.delta_upkeep import disk_bytes, tidy

    spark = spark_session("cdcsync-bench-delta-upkeep")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")  # the compressed window
    base = Path(tempfile.mkdtemp(prefix="cdcsync-bench-upkeep-"))
    paths = {"as left": str(base / "left"), "upkeep": str(base / "upkeep")}
    checkpoints: list[dict[str, Any]] = []
    upkeep_s: list[float] = []
    try:
        say(f"{args.rows:,} rows; {args.merges} MERGEs of {args.batch:,} scattered updates; upkeep every "
            f"{args.upkeep_every}")  # fmt: skip
        rows = spark.range(args.rows).selectExpr("id", "md5(cast(id as string)) || md5(cast(id * 7 as string)) AS body",
                                                 "1L AS v")  # fmt: skip
        for path in paths.values():
            rows.write.format("delta").save(path)
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = "
                      "'interval 0 hours')")  # fmt: skip
        for n in range(1, args.merges + 1):
            ids = random.Random(n).sample(range(args.rows), args.batch)
            batch = spark.createDataFrame([(i, f"{n:08d}{i:056d}", n + 1) for i in ids], "id long, body string, v long")
            batch.createOrReplaceTempView("changes")
            for path in paths.values():
                spark.sql(f"MERGE INTO delta.`{path}` t USING changes s ON t.id = s.id "
                          "WHEN MATCHED AND s.v > t.v THEN UPDATE SET *")  # fmt: skip
            if n % args.upkeep_every == 0 or n == args.merges:
                started = time.monotonic()
                tidy(spark, paths["upkeep"], 0)
                upkeep_s.append(time.monotonic() - started)
                point: dict[str, Any] = {"merges": n}
                for name, path in paths.items():
                    files, live = detail(spark, path)
                    disk = disk_bytes(path) or 0
                    point[name] = {"files": files, "live_mib": round(live / MIB, 1), "disk_mib": round(disk / MIB, 1),
                                   "ratio": round(disk / live, 2)}  # fmt: skip
                checkpoints.append(point)
                say(f"  after {n} MERGEs: as left {point['as left']['ratio']}x ({point['as left']['files']} files), "
                    f"with upkeep {point['upkeep']['ratio']}x ({point['upkeep']['files']} files); "
                    f"upkeep {upkeep_s[-1]:.1f} s")  # fmt: skip
        last = checkpoints[-1]
        left_bytes = last["as left"]["disk_mib"] * MIB
        first_bytes = checkpoints[0]["as left"]["disk_mib"] * MIB
        merges_between = last["merges"] - checkpoints[0]["merges"]
        per_change = (left_bytes - first_bytes) / max(merges_between * args.batch, 1)
        live = last["upkeep"]["live_mib"] * MIB
        kept = per_change * args.rate * args.retention_hours * 3600
        projected = round(last["upkeep"]["ratio"] + kept / live, 2)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "rows": args.rows,
        "batch": args.batch,
        "merges": args.merges,
        "upkeep_every": args.upkeep_every,
        "checkpoints": checkpoints,
        "upkeep_s_max": round(max(upkeep_s), 1),
        "disk_bytes_per_change": round(per_change, 1),
        "ratio_as_left": last["as left"]["ratio"],
        "ratio_with_upkeep": last["upkeep"]["ratio"],
        "projected_ratio": projected,
        "projection": f"{args.retention_hours} h window at {args.rate:,.0f} changes/s on this table",
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"bytes on disk / live: as the MERGEs left it {result['ratio_as_left']}x, with the upkeep "
        f"{result['ratio_with_upkeep']}x (window compressed to 0 h); upkeep pass at most {result['upkeep_s_max']} s"
    )
    print(f"one change adds {per_change:,.0f} bytes on disk; a {result['projection']} keeps "
          f"{kept / MIB:,.0f} MiB of replaced files: ratio {projected}x")  # fmt: skip


if __name__ == "__main__":
    main()
