"""``python -m bench.jvm_start``: a Spark driver's cold start, with and without the class archive, in one run.

Each sample is a fresh Python process that starts a session as every cdcsync
command does (``spark_session``), then reads ``--rows`` rows from the stack's
Postgres through Spark JDBC twice, as a ``bootstrap --from source`` reads its
pieces:

- **session**: ``spark_session`` until it returns (the JVM's start, Spark's);
- **first read**: the first JDBC read to Arrow, the first job of the JVM;
- **second read**: the same read again: what the work costs once warm;
- **warm job**: then a CPU-bound Spark job (an aggregation over 3M rows),
  median of 9 after 8 warm-up runs: what the archive costs a JVM once warm.

``with`` starts from the class archive (``cdcsync.class_archive``; made by
``make install``), ``without`` has ``CDCSYNC_SPARK_CLASS_ARCHIVE=off``;
alternating, ``--rounds`` of each. Prints the medians and the ratio. Not a
pass/fail test.

Usage: python -m bench.jvm_start [--rounds R] [--rows N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from bench.common import ENV, say

PROBE = """
import json, sys, time
started = time.perf_counter()
from cdcsync.spark import spark_session
spark = spark_session("cdcsync-bench-jvm-start")
times = {"session": time.perf_counter() - started}
url, rows = sys.argv[1], int(sys.argv[2])
options = {"driver": "org.postgresql.Driver", "user": sys.argv[3], "password": sys.argv[4], "fetchsize": "5000"}
query = (f"(SELECT g AS id, 'item-' || g AS name, g % 100 AS qty, ((g % 1000) / 10.0)::text AS price, "
         f"now()::text AS updated_at FROM generate_series(1, {rows}) g) AS t")
for phase in ("first_read", "second_read"):
    t = time.perf_counter()
    assert spark.read.jdbc(url, query, properties=options).toArrow().num_rows == rows
    times[phase] = time.perf_counter() - t
frame = spark.range(3_000_000).selectExpr("id", "cast(id as string) as t", "id % 97 as k")
job = lambda: frame.groupBy("k").agg({"t": "max", "id": "sum"}).collect()
for _ in range(8):
    job()
warm = []
for _ in range(9):
    t = time.perf_counter()
    job()
    warm.append(time.perf_counter() - t)
times["warm_job"] = sorted(warm)[4]
print(json.dumps(times))
"""
PHASES = ("session", "first_read", "second_read", "warm_job")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=25_000, help="rows per read (a bootstrap piece's 25,000)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.driver import archive_path

    path = archive_path()
    if path is None or not path.is_file():
        raise SystemExit(f"no class archive at {path}: run `make install` (or python -m cdcsync.class_archive)")
    url = f"jdbc:postgresql://127.0.0.1:{ENV['PG_PORT']}/{ENV['PG_DATABASE']}"
    samples: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
    for n in range(1, args.rounds + 1):
        for way in ("with", "without"):
            env = {**os.environ, "CDCSYNC_SPARK_CLASS_ARCHIVE": "on" if way == "with" else "off"}
            probe = [sys.executable, "-c", PROBE, url, str(args.rows), ENV["PG_USER"], ENV["PG_PASSWORD"]]
            done = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"the probe failed: {done.stderr.strip()[-2000:]}")
            times = json.loads(done.stdout.strip().splitlines()[-1])
            samples[way].append(times)
            say(f"round {n}, {way:<7} archive: " + ", ".join(f"{p} {times[p]:.2f} s" for p in PHASES))
    medians = {way: {p: statistics.median(s[p] for s in runs) for p in PHASES} for way, runs in samples.items()}
    results: dict[str, Any] = {"archive": str(path), "rounds": args.rounds, "rows": args.rows, "median_s": medians}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"a Spark driver's cold start, median of {args.rounds} fresh processes each ({args.rows:,}-row JDBC reads)")
    print(f"{'':<14} {'with archive':>13} {'without':>9} {'ratio':>6}")
    for p in PHASES:
        on, off = medians["with"][p], medians["without"][p]
        print(f"{p:<14} {on:>11.2f} s {off:>7.2f} s {off / on:>6.2f}")
    on, off = (sum(medians[w][p] for p in PHASES[:2]) for w in ("with", "without"))
    print(f"{'both':<14} {on:>11.2f} s {off:>7.2f} s {off / on:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
