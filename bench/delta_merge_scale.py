"""``python -m bench.delta_merge_scale``: the warehouse's MERGE of one batch into tables of growing size.

A follower's batch of changes is the same size whatever the table it goes
to, so a MERGE that costs the same at 100k rows and at 10M needs to find
its keys without reading the whole table. This builds one narrow table per
``--sizes`` entry (keys ``0`` .. ``N-1`` as text, a 96-character text, an
int and a timestamp) the way a bootstrap fills a warehouse table: the rows
written to the staged table's spool (by Spark, as Parquet files of the
spool's columns), then ``publish``ed by the Delta sink (``delta_load``),
with the sink's table properties. Then, in one Spark session, it applies ``--rounds``
batches of ``--batch`` changes through the sink's own ``write`` (the
version-guarded MERGE): keys spread uniformly over each table (the same
fractions of it in every table), mostly updates, 2 % inserts of new keys and
2 % deletes. Each round MERGEs into every table, the sizes in a rotating
order so that the JVM's warm-up favours none; the first round only warms up.

It prints per size the table's files, the median and slowest MERGE, the
median's ratio to the smallest size's, and what the last MERGE touched
(its ``operationMetrics``: target files removed and added, deletion vectors
added, rows copied, and the time Delta spent scanning the table to find the
matched rows). Local Spark only; no stack needed. Not a pass/fail test.

Usage: python -m bench.delta_merge_scale [--sizes 100000,1000000,10000000] [--batch 1000] [--rounds N] [--dir D]
       [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import say

TARGET = "items"
TYPES = {"n": "int", "body": "text", "at": "timestamp"}
MERGE_METRICS = (
    "numTargetFilesRemoved",
    "numTargetFilesAdded",
    "numTargetDeletionVectorsAdded",
    "numTargetRowsCopied",
    "numTargetRowsUpdated",
    "numTargetRowsInserted",
    "scanTimeMs",
    "rewriteTimeMs",
    "executionTimeMs",
)


def _row(doc_id: str, version: int, delete: bool = False) -> Any:
    from cdcsync.events import Change
    from cdcsync.sync.mapping import Row

    body = f"{version:032x}" * 3  # 96 characters
    doc = None if delete else {"n": version, "body": body, "at": "2026-11-28T10:00:00Z"}
    change = Change("bench", "public.items", "d" if delete else "u", {"id": doc_id}, doc, 1_764_324_000_000,
                    version, "t", 0, version)  # fmt: skip
    return Row(change, TARGET, doc_id, doc)


class Sized:
    """One table of ``rows`` rows at ``path``, filled as a bootstrap fills one, and the sink that MERGEs into it."""

    def __init__(self, spark: Any, base: Path, rows: int) -> None:
        from cdcsync.sync.mapping import TableMapping
        from cdcsync.sync.sinks.delta import DeltaSink

        self.spark, self.rows, self.next_key = spark, rows, rows
        self.sink = DeltaSink("warehouse", spark, str(base / f"n{rows}"))
        self.mapping = TableMapping(table="public.items", target=TARGET, types=dict(TYPES))
        self.sink.open([self.mapping])
        self.path = f"{self.sink.path}/{TARGET}"
        self.seconds: list[float] = []

    def fill(self) -> None:
        """Stage the table, spool its rows with Spark (what each batch's ``Spool.add`` would write), publish."""
        from pyspark.sql import functions as F

        from cdcsync.sync.sinks.delta_load import SUFFIX, column

        self.sink.stage([self.mapping])
        staged = self.sink._tables[TARGET].path
        spool = f"{staged}{SUFFIX}"
        rows = self.spark.range(self.rows).select(
            F.col("id").cast("string").alias("_cdcsync_id"),
            F.lit(1).cast("bigint").alias("_cdcsync_version"),
            F.lit(False).alias("_cdcsync_deleted"),
            F.lit("2026-11-28 09:00:00").cast("timestamp").alias("_cdcsync_commit_ts"),
            F.col("id").alias(column("n")),
            F.concat(F.sha2(F.col("id").cast("string"), 256), F.md5(F.col("id").cast("string"))).alias(column("body")),
            (F.lit(1_764_320_000) + F.col("id")).cast("timestamp").alias(column("at")),
        )
        rows.write.mode("append").parquet(spool)
        self.sink.publish()

    def merge(self, batch_id: int, fractions: list[float], version: int) -> float:
        """One batch: keys at ``fractions`` of the table; the first 2 % new keys, the next 2 % deletes."""
        inserts = deletes = max(1, len(fractions) // 50)
        rows = []
        for i, fraction in enumerate(fractions):
            if i < inserts:
                doc_id = str(self.next_key)
                self.next_key += 1
            else:
                doc_id = str(min(self.rows - 1, int(fraction * self.rows)))
            rows.append(_row(doc_id, version, delete=inserts <= i < inserts + deletes))
        started = time.monotonic()
        result = self.sink.write(batch_id, rows)
        took = time.monotonic() - started
        assert not result.rejected, result.rejected[:3]
        return took

    def last_merge(self) -> dict[str, Any]:
        from delta.tables import DeltaTable

        table = DeltaTable.forPath(self.spark, self.path)
        for entry in table.history(5).collect():  # an auto compaction may have committed after the MERGE
            if entry["operation"] == "MERGE":
                got = entry["operationMetrics"] or {}
                return {k: int(got[k]) for k in MERGE_METRICS if k in got}
        return {}

    def files(self) -> int:
        from delta.tables import DeltaTable

        return int(DeltaTable.forPath(self.spark, self.path).detail().collect()[0]["numFiles"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000", help="rows of each table, comma-separated")
    parser.add_argument("--batch", type=int, default=1000, help="changes per MERGE")
    parser.add_argument("--rounds", type=int, default=6, help="MERGEs per table after the warm-up round")
    parser.add_argument("--dir", default=None, help="where the tables go (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from cdcsync.spark import spark_session

    spark = spark_session("cdcsync-bench-delta-merge-scale")
    base = Path(tempfile.mkdtemp(prefix="cdcsync-bench-merge-scale-", dir=args.dir))
    try:
        tables = []
        for rows in sizes:
            started = time.monotonic()
            tables.append(Sized(spark, base, rows))
            tables[-1].fill()
            say(f"a {rows:,}-row table filled in {time.monotonic() - started:.0f} s, {tables[-1].files()} files")
        version = 10
        for n in range(args.rounds + 1):
            rng = random.Random(n)
            fractions = [rng.random() for _ in range(args.batch)]
            shift = n % len(tables)
            for table in tables[shift:] + tables[:shift]:
                version += 1
                took = table.merge(n, fractions, version)
                if n:  # round 0 warms up
                    table.seconds.append(took)
                say(f"  round {n}{' (warm-up)' if not n else ''}: {table.rows:,} rows, MERGE {took:.2f} s")
        results = []
        for table in tables:
            results.append({
                "rows": table.rows,
                "files": table.files(),
                "merge_s_median": round(statistics.median(table.seconds), 2),
                "merge_s_max": round(max(table.seconds), 2),
                "last_merge": table.last_merge(),
            })  # fmt: skip
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    smallest = results[0]["merge_s_median"]
    for r in results:
        r["ratio"] = round(r["merge_s_median"] / smallest, 2)
    if args.json:
        print(json.dumps({"batch": args.batch, "rounds": args.rounds, "results": results}, indent=2))
        return 0
    heads = ("rows", "files", "median s", "max s", "ratio", "files -/+", "DVs", "copied", "scan ms")
    print("".join(f"{h:>12}" for h in heads))
    for r in results:
        m = r["last_merge"]
        cells = (
            f"{r['rows']:,}", r["files"], r["merge_s_median"], r["merge_s_max"], f"{r['ratio']}x",
            f"{m.get('numTargetFilesRemoved', '?')}/{m.get('numTargetFilesAdded', '?')}",
            m.get("numTargetDeletionVectorsAdded", "?"), m.get("numTargetRowsCopied", "?"), m.get("scanTimeMs", "?"),
        )  # fmt: skip
        print("".join(f"{c:>12}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
