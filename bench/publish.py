"""``python -m bench.publish``: a bootstrap's publish of many small tables, one table per publish and all at once.

A bootstrap or reindex stages every target, fills it, then publishes. With
small tables the publish's fixed costs are most of a bootstrap: for
Elasticsearch the grace before the old index is dropped (``DROP_GRACE_S``),
for Delta one overwrite job per table. This stages ``--tables`` targets of
``--rows`` rows each over live ones and times the publish two ways in one
run, alternating which goes first:

- **one per publish**: a sink per target, each staged, filled and published
  alone, one after the other (what the publish cost per table before);
- **all at once**: one sink stages, fills and publishes every target
  (what ``bootstrap`` does: one alias request and one grace for
  Elasticsearch, ``tables_at_once`` overwrites at a time for Delta).

Only the publish calls are timed. Every alias or table is checked to hold the
new rows afterwards. Prints seconds per way and the ratio, per sink. Needs
the stack's Elasticsearch (``make up``) and local Spark. Not a pass/fail test.

Usage: python -m bench.publish [--sinks search,warehouse] [--tables 8] [--rows 100] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.common import ENV, say


def rows_of(targets: list[str], n: int, version: int) -> list[Any]:
    from cdcsync.events import Change
    from cdcsync.sync.mapping import Row

    out = []
    for t in targets:
        for i in range(n):
            doc = {"n": i, "name": f"{t} v{version}"}
            change = Change("bench", f"public.{t}", "u", {"id": i}, doc, int(time.time() * 1000), version, "t", 0, 0)
            out.append(Row(change, t, str(i), doc))
    return out


def timed_publish(make: Callable[[], Any], groups: list[list[str]], rows: int, version: int) -> float:
    """Stage and fill each group of targets in a sink of its own; the seconds its publishes took together."""
    from cdcsync.sync.mapping import TableMapping

    spent = 0.0
    for group in groups:
        sink = make()
        sink.stage([TableMapping(f"public.{t}", t, types={"n": "int", "name": "text"}) for t in group])
        sink.write(version, rows_of(group, rows, version))
        started = time.monotonic()
        sink.publish()
        spent += time.monotonic() - started
        sink.close()
    return spent


def run(name: str, make: Callable[[], Any], args: argparse.Namespace) -> dict[str, float]:
    from cdcsync.sync.mapping import TableMapping

    targets = [f"t{i}" for i in range(args.tables)]
    live = make()
    live.open([TableMapping(f"public.{t}", t, types={"n": "int", "name": "text"}) for t in targets])
    live.write(1, rows_of(targets, args.rows, 1))
    ways = {"one per publish": [[t] for t in targets], "all at once": [targets]}
    times: dict[str, list[float]] = {way: [] for way in ways}
    version = 1
    for r in range(args.rounds):
        for way in list(ways) if r % 2 == 0 else list(ways)[::-1]:
            version += 1
            times[way].append(timed_publish(make, ways[way], args.rows, version))
            for t in targets:
                names = {doc["name"] for _v, doc in live.held(t).values()}
                assert names == {f"{t} v{version}"}, (name, way, t, names)
        say(f"  {name} round {r + 1}/{args.rounds}: " + ", ".join(f"{w} {s[-1]:.2f} s" for w, s in times.items()))
    live.close()
    medians = {way: round(statistics.median(s), 2) for way, s in times.items()}
    return medians | {"ratio": round(medians["one per publish"] / medians["all at once"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sinks", default="search,warehouse", help="search (Elasticsearch), warehouse (Delta)")
    parser.add_argument("--tables", type=int, default=8, help="targets staged and published")
    parser.add_argument("--rows", type=int, default=100, help="rows per target")
    parser.add_argument("--rounds", type=int, default=3, help="publishes timed per way")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    results: dict[str, Any] = {}
    tag = f"bpubt{uuid.uuid4().hex[:6]}-"
    for name in args.sinks.split(","):
        if name == "search":
            from elasticsearch import Elasticsearch

            from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink

            url = f"http://127.0.0.1:{ENV['ES_PORT']}"
            say(f"Elasticsearch: {args.tables} targets of {args.rows} rows, {args.rounds} rounds ...")
            try:
                results[name] = run(name, partial(ElasticsearchSink, "bench", url, index_prefix=tag), args)
            finally:
                es = Elasticsearch(url)
                found = list(es.indices.get(index=f"{tag}*"))
                if found:
                    es.indices.delete(index=",".join(found))
        elif name == "warehouse":
            from cdcsync.spark import spark_session
            from cdcsync.sync.sinks.delta import DeltaSink

            spark, lake = spark_session("cdcsync-bench-publish"), tempfile.mkdtemp(prefix="cdcsync-bench-publish-")
            say(f"Delta: {args.tables} targets of {args.rows} rows, {args.rounds} rounds ...")
            results[name] = run(name, partial(DeltaSink, "warehouse", spark, lake), args)
        else:
            parser.error(f"--sinks: unknown sink {name!r} (search, warehouse)")
    if args.json:
        print(json.dumps(results))
    else:
        for name, f in results.items():
            print(
                f"{name:>10}: publish of {args.tables} tables {f['one per publish']} s one per publish, "
                f"{f['all at once']} s all at once ({f['ratio']}x as fast)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
