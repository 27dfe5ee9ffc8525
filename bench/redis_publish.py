"""``python -m bench.redis_publish``: the Redis sink's publish of a staged generation, two ways, in one run.

A bootstrap or reindex into Redis writes a staged generation, then
``publish`` moves every staged row over its live key (docs/reindex.md). This
measures that second pass on the same rows, twice per round, alternating:

- **client scan** (the way before): the client SCANs the staged row keys and
  sends them back in promote calls of ``ROWS_PER_CALL`` ids, pipelined;
- **server scan** (what ``RedisSink.publish`` does): each promote call SCANs
  on from the previous call's cursor and moves what it found.

Only the promote pass of rows is timed (the purge pass and the markers are
the same either way here: no live rows, no markers), and every row is
checked to be live afterwards.

``--others`` unrelated keys sit in the database too (a bench's ceiling, other
followers' prefixes): a SCAN walks them as well. Prints seconds, µs per row
and the ratio. Needs the stack's Redis (``make up``). Not a pass/fail test.

Usage: python -m bench.redis_publish [--rows N] [--others N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from bench.common import ENV, say

FIELDS = {"name": "item", "qty": "7", "price": "12.50", "updated_at": "2026-11-24T20:00:00Z"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000, help="staged rows to publish")
    parser.add_argument("--others", type=int, default=300_000, help="unrelated keys in the same database")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    import redis

    from cdcsync.sync.mapping import TableMapping
    from cdcsync.sync.sink import batched
    from cdcsync.sync.sinks.redis import RedisSink
    from cdcsync.sync.sinks.redis_reads import PIPELINE_COMMANDS, SCAN_COUNT, glob_escape
    from cdcsync.sync.sinks.redis_scripts import PUBLISH_SHA

    url = f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0"
    client = redis.Redis.from_url(url, decode_responses=True)
    tag = f"bpub{uuid.uuid4().hex[:6]}"
    mapping = TableMapping("public.items", "items", key_columns=("id",))

    def fill(pattern: str, n: int) -> None:
        pipe = client.pipeline(transaction=False)
        for i in range(n):
            pipe.hset(pattern.format(i), mapping={"_v": "1", **FIELDS})
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()

    def client_scan(sink: RedisSink) -> None:
        head = sink.row_key("items", "")
        keys = client.scan_iter(match=glob_escape(head) + "*", count=SCAN_COUNT)
        for chunk in batched(keys, PIPELINE_COMMANDS):
            sink._publication().by_id(PUBLISH_SHA, "items", "row", [(key, key[len(head) :]) for key in chunk])

    def server_scan(sink: RedisSink) -> None:
        sink._publication().scan(PUBLISH_SHA, "items", sink._generation_of("items"), tag)

    def clear(pattern: str) -> None:
        for keys in batched(client.scan_iter(match=pattern, count=SCAN_COUNT), PIPELINE_COMMANDS):
            client.unlink(*keys)

    figures: dict[str, list[float]] = {"client scan": [], "server scan": []}
    try:
        fill(f"{tag}other:{{}}", args.others)
        for round_ in range(args.rounds):
            for way in ("client scan", "server scan") if round_ % 2 == 0 else ("server scan", "client scan"):
                clear(f"{tag}:*")
                sink = RedisSink("bench", url, prefix=tag)
                sink.stage([mapping])  # drops the previous stage's keys and journal
                fill(sink.row_key("items", "{}"), args.rows)
                started = time.perf_counter()
                client_scan(sink) if way == "client scan" else server_scan(sink)  # the promote pass only
                seconds = time.perf_counter() - started
                live = sum(1 for _ in client.scan_iter(match=f"{tag}:items:*", count=SCAN_COUNT))
                if live != args.rows:
                    raise SystemExit(f"{way}: {live:,} of {args.rows:,} rows published")
                figures[way].append(seconds)
                say(f"round {round_ + 1}, {way}: {args.rows:,} rows in {seconds:.2f} s")
                sink.close()
    finally:
        clear(f"{tag}*")
        client.close()
    results: dict[str, Any] = {"rows": args.rows, "others": args.others}
    for way, seconds in figures.items():
        results[way] = {"seconds": seconds, "us_per_row": round(statistics.median(seconds) / args.rows * 1e6, 1)}
    results["ratio"] = round(statistics.median(figures["client scan"]) / statistics.median(figures["server scan"]), 2)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"publish of {args.rows:,} staged rows, {args.others:,} other keys in the database")
    for way in figures:
        runs = " / ".join(f"{s:.2f}" for s in results[way]["seconds"])
        print(f"  {way:12} {runs} s   {results[way]['us_per_row']} µs/row (median)")
    print(f"  server scan is {results['ratio']}x as fast as client scan")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
