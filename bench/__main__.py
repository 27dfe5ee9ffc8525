"""``make bench``: follower throughput against the same sink's raw ceiling, measured in one run.

For each sink (Elasticsearch, Redis, Delta):

- **catch-up**: the log already holds N changes (``--rows``, 200k); a fresh
  follower applies them all (Kafka -> Spark -> parse, version, map -> sink).
  ``--runs`` times per sink (3), each by a fresh follower into a fresh store,
  each next to a raw ceiling measured right after it: all runs are printed.
  changes/s = N / time spent in batches (Spark's own trigger timings); the
  query's one-time start-up is reported apart. The Spark session is warmed
  first by reading the topic four times through Python workers
  (``_warm_up``), as a running daemon's would be. A new query still compiles
  its own generated code while it runs, which a run of 50k changes (3-5 s)
  mostly measures (docs/benchmarks.md at commit 84d0961).
- **live**: the follower runs as the daemon does (its kind's trigger interval) while M updates
  (``--live``, at most ``--rows``) are committed to Postgres; changes/s = M /
  (last change visible - first commit). The fixed delay of a change (trigger
  interval, Debezium's poll) is in it once: a larger M weighs it less. "live
  in Kafka" is M / (last change in the topic - first commit): capture alone,
  in the same phase, which bounds the live figure.
- **raw ceiling**: the same documents written straight with the client library
  (Elasticsearch bulk, a Redis pipeline of HSETs, one Delta append), no
  versions, no Kafka, no Spark batches.

The ratios compare each path with the ceiling. Each catch-up and raw write
also gets its CPU per change across the stack and the machine's bound at that
cost (``bench.cpu.budget``): a bound below the goal means the follower must
spend less CPU per change, not wait less. Not a pass/fail test.
Usage: python -m bench [--rows N] [--runs 3] [--sinks search,cache,warehouse] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import cpu, raw
from bench.common import cleanup, one_table_config, say, settle_redis, three_followers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, default=200000, help="changes in the catch-up phase (small runs mostly measure warm-up)"
    )
    parser.add_argument("--sinks", default="search,cache,warehouse")
    parser.add_argument("--live", type=int, default=50000, help="updates committed in the live phase")
    parser.add_argument(
        "--batch", type=int, help="max_offsets_per_trigger of the followers (default: their kind's, as in the daemon)"
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="catch-ups per sink, each a fresh follower into a fresh store, with its raw"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every follower batch (counts, ms)")
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s", stream=sys.stderr)
        logging.getLogger("py4j").setLevel(logging.WARNING)

    from confluent_kafka import Consumer, TopicPartition

    from cdcsync.connectors.apply import apply
    from cdcsync.sources.postgres.connection import connect as connect_postgres
    from cdcsync.spark import spark_session

    tag = f"bench{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-"))
    wanted = args.sinks.split(",")
    followers = three_followers(tag, tmp, wanted)
    if args.batch:
        for f in followers:
            f.update(max_offsets_per_trigger=args.batch)
    again = {f["name"]: [_again(f, n, tag, tmp) for n in range(2, args.runs + 1)] for f in followers}
    every = followers + [f for runs in again.values() for f in runs]
    config = one_table_config(tag, table, every, tmp, heartbeat_interval_ms=1000)
    by_name = {c.name: c for c in config.followers}
    source = config.sources[0]
    topic = source.topic(source.tables[0])
    pg = connect_postgres(source, autocommit=True)
    pg.execute(
        f"CREATE TABLE {table} (id int PRIMARY KEY, name text, qty int, price numeric(10,2), "
        "updated_at timestamptz DEFAULT now())"
    )
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": tag})

    def topic_end() -> int:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]

    results: dict[str, Any] = {"rows": args.rows}
    try:
        apply(config)
        say(f"capture: writing {args.rows} rows to Postgres in transactions of 1000 ...")
        started = time.perf_counter()
        for low in range(1, args.rows + 1, 1000):
            high = min(low + 999, args.rows)
            pg.execute(
                f"INSERT INTO {table} (id, name, qty, price) SELECT g, 'name ' || g, g % 100, g % 1000 / 7.0 "
                f"FROM generate_series({low}, {high}) g"
            )
        while topic_end() < args.rows:
            time.sleep(0.2)
        capture_s = time.perf_counter() - started
        results["capture_changes_per_s"] = round(args.rows / capture_s)
        say(f"capture: {args.rows} changes in Kafka after {capture_s:.1f}s ({args.rows / capture_s:,.0f}/s)")

        spark = spark_session("cdcsync-bench")
        results["warm_up_s"] = _warm_up(spark, config, topic)
        for cfg in (by_name[f["name"]] for f in followers):
            runs = []
            for n, run_cfg in enumerate([cfg] + [by_name[f["name"]] for f in again[cfg.name]]):
                run, follower = _catch_up(spark, config, run_cfg, topic, tmp, tag)
                runs.append(run)
                if n == 0:  # the live phase once per sink, by the first run's follower
                    changes = min(args.live, args.rows)
                    live, captured = _live(pg, table, spark, config, cfg, follower, changes, topic_end)
            entry = {
                **runs[0],
                "live_changes_per_s": round(live),
                "live_captured_per_s": round(captured),
                "catch_up_runs": runs,
            }
            entry["live_ratio"] = round(entry["live_changes_per_s"] / entry["raw_ceiling_docs_per_s"], 2)
            results[cfg.name] = entry
            say(
                f"[{cfg.name}] catch-up {entry['catch_up_changes_per_s']:,}/s  live {entry['live_changes_per_s']:,}/s  "
                f"raw {entry['raw_ceiling_docs_per_s']:,}/s  ratios {entry['catch_up_ratio']} / {entry['live_ratio']}  "
                f"(live capture alone {entry['live_captured_per_s']:,}/s)"
            )
        spark.stop()
    finally:
        cleanup(config, tag, table, pg)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(
            f"\n{'sink':<10} {'catch-up/s':>11} {'live/s':>9} {'raw/s':>9} {'catch-up ratio':>15} {'live ratio':>11}"
            f" {'live in Kafka/s':>16} {'start-up s':>11}"
        )
        for name in (f["name"] for f in followers):
            e = results[name]
            print(
                f"{name:<10} {e['catch_up_changes_per_s']:>11,} {e['live_changes_per_s']:>9,} "
                f"{e['raw_ceiling_docs_per_s']:>9,} {e['catch_up_ratio']:>15} {e['live_ratio']:>11}"
                f" {e['live_captured_per_s']:>16,} {e['query_start_s']:>11}"
            )
        print(f"capture (Postgres -> Debezium -> Kafka): {results['capture_changes_per_s']:,} changes/s")
        print("catch-up runs (changes/s against the raw ceiling measured right after each):")
        for name in (f["name"] for f in followers):
            print(
                f"  {name:<10} "
                + ";  ".join(
                    f"{r['catch_up_changes_per_s']:,} / {r['raw_ceiling_docs_per_s']:,} = {r['catch_up_ratio']}"
                    for r in results[name]["catch_up_runs"]
                )
            )
        print(
            "CPU per change of each catch-up (us, every part of the stack), the machine's share busy, and the ratio"
            " it could reach with every core busy at that cost (bound / raw ceiling):"
        )
        for name in (f["name"] for f in followers):
            print(
                f"  {name:<10} "
                + ";  ".join(
                    f"{r['catch_up_cpu']['us_total']} us, busy {r['catch_up_cpu']['busy']}, "
                    f"bound {r['catch_up_bound_ratio']}"
                    for r in results[name]["catch_up_runs"]
                )
                + f"  (raw: {results[name]['raw_cpu']['us_total']} us per document)"
            )
    return 0


def _again(follower: dict[str, Any], n: int, tag: str, tmp: Path) -> dict[str, Any]:
    """Run ``n`` of a follower's catch-up: the same sink under its own name, store, checkpoint and dead letters."""
    name = f"{follower['name']}{n}"
    again = {
        **follower,
        "name": name,
        "checkpoint_dir": str(tmp / f"ckpt-{name}"),
        "dead_letter_topic": f"dlq.{tag}.{name}",
    }
    if follower["kind"] == "elasticsearch":
        again["prefix"] = f"{tag}-r{n}-"
    elif follower["kind"] == "redis":
        again["prefix"] = f"{tag}r{n}"
    else:
        again["path"] = str(tmp / f"warehouse{n}")
    return again


def _catch_up(spark: Any, config: Any, cfg: Any, topic: str, tmp: Path, tag: str) -> tuple[dict[str, Any], Any]:
    """A fresh follower applies the whole log, then the same documents go straight to the sink: one run's figures."""
    from cdcsync.sync.build import build_follower
    from cdcsync.sync.stream import start_query

    say(f"[{cfg.name}] catch-up from offset 0 ...")
    follower = build_follower(config, cfg, spark)
    _settle(cfg)
    started, before = time.perf_counter(), cpu.sample()
    query = start_query(spark, config, cfg, follower, once=True)
    query.awaitTermination()
    total_s, used = time.perf_counter() - started, cpu.cores(before, cpu.sample())
    # Time spent in batches that carried data; the rest is query start-up. The log holds more than --rows
    # for every follower after the first (the live phase of the first run of each sink adds updates).
    records = sum(p["numInputRows"] for p in query.recentProgress)
    catch_s = (
        sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p["numInputRows"]) / 1000
        or total_s
    )
    say(
        f"[{cfg.name}] batches (records, ms): "
        + ", ".join(f"{p['numInputRows']}/{p['durationMs']}" for p in query.recentProgress if p["numInputRows"])
    )
    docs = raw.documents(config, follower, topic)
    _settle(cfg)
    started, before = time.perf_counter(), cpu.sample()
    raw.writer(cfg.kind, docs, tmp, spark)(f"{tag}-{cfg.name}-raw")
    raw_s, raw_used = time.perf_counter() - started, cpu.cores(before, cpu.sample())
    run = {
        "query_start_s": round(total_s - catch_s, 1),
        "catch_up_changes": records,
        "catch_up_changes_per_s": round(records / catch_s),
        "raw_ceiling_docs_per_s": round(len(docs) / raw_s),
        "catch_up_cpu_cores": used,
        "raw_cpu_cores": raw_used,
    }
    run["catch_up_ratio"] = round(run["catch_up_changes_per_s"] / run["raw_ceiling_docs_per_s"], 2)
    run["catch_up_cpu"] = cpu.budget(used, total_s, records)  # start-up included: a catch-up pays it too
    run["raw_cpu"] = cpu.budget(raw_used, raw_s, len(docs))
    run["catch_up_bound_ratio"] = round(run["catch_up_cpu"]["bound_per_s"] / run["raw_ceiling_docs_per_s"], 2)
    say(f"[{cfg.name}] catch-up {run['catch_up_changes_per_s']:,}/s  raw {run['raw_ceiling_docs_per_s']:,}/s")
    say(f"[{cfg.name}] cpu (cores), catch-up incl. start-up: {cpu.summary(used)}")
    say(f"[{cfg.name}] {cpu.budget_line(run['catch_up_cpu'], 'change')} ({run['catch_up_bound_ratio']} of raw)")
    say(f"[{cfg.name}] cpu (cores), raw: {cpu.summary(raw_used)}")
    say(f"[{cfg.name}] raw: {cpu.budget_line(run['raw_cpu'], 'document')}")
    return run, follower


def _settle(cfg: Any) -> None:
    """Before a timed Redis phase, its AOF rewritten (``bench.common.settle_redis``): each starts from one file."""
    if cfg.kind == "redis":
        import redis

        settle_redis(redis.Redis.from_url(cfg.url))


def _warm_up(spark: Any, config: Any, topic: str, passes: int = 4) -> float:
    """Read the topic ``passes`` times the way a follower does, so every follower meets a warm process.

    A running daemon's JVM compiled its Kafka-to-Arrow path and started its
    Python workers long ago; a fresh Spark session does both in the first
    batches, and without this whichever follower runs first is charged for it
    (measured: the first of two identical followers ran at half the second's
    rate). Each pass reads the topic in ``defaultParallelism`` tasks and hands
    it to Python workers as Arrow, like ``sync.executors``, which import the
    follower's modules and turn the columns into Python values, writing nothing.
    """
    from cdcsync.sync.arrow_records import RECORD_COLUMNS

    def touch(batches: Any) -> Any:
        import pyarrow as pa

        import cdcsync.sync.stream  # noqa: F401  (what a worker imports for its first follower)

        seen = 0
        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in RECORD_COLUMNS]
            seen += len(columns[0])
        yield pa.RecordBatch.from_pydict({"seen": [seen]})

    started = time.perf_counter()
    for _ in range(passes):
        (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("minPartitions", str(spark.sparkContext.defaultParallelism))
            .load()
            .select(*RECORD_COLUMNS)
            .mapInArrow(touch, "seen long")
            .toArrow()
        )
    seconds = time.perf_counter() - started
    say(f"warm-up: {passes} reads of the topic through Python workers in {seconds:.1f}s")
    return round(seconds, 1)


def _live(
    pg: Any, table: str, spark: Any, config: Any, cfg: Any, follower: Any, changes: int, topic_end: Any
) -> tuple[float, float]:
    """Commit ``changes`` updates while the follower runs.

    Returns changes/s until the last is visible in the sink, and changes/s
    until the last is in Kafka (capture, measured in the same phase): the
    difference is what the follower adds.
    """
    from cdcsync.sync.daemon import stop_between_batches
    from cdcsync.sync.stream import start_query

    query = start_query(spark, config, cfg, follower, once=False)
    try:
        time.sleep(5)  # the query is up and idle
        marker = f"live-{uuid.uuid4().hex[:6]}"
        captured_at, in_kafka = None, topic_end() + changes
        started = time.perf_counter()
        for low in range(1, changes + 1, 500):
            pg.execute(f"UPDATE {table} SET name = '{marker}' WHERE id BETWEEN {low} AND {min(low + 499, changes)}")
        deadline = started + 900
        target = follower.mappings[next(iter(follower.mappings))].target
        # Batches apply in log order, so when the last updated row shows the marker, every update does.
        while time.perf_counter() < deadline:
            if captured_at is None and topic_end() >= in_kafka:
                captured_at = time.perf_counter()
            if _shows(cfg, follower, target, str(changes), marker):
                visible_at = time.perf_counter()
                captured_at = captured_at or visible_at
                return changes / (visible_at - started), changes / (captured_at - started)
            time.sleep(0.2)
        raise RuntimeError(f"{cfg.name}: live changes not visible within 900 s")
    finally:
        stop_between_batches(query)  # as the daemon stops: a batch cut short prints py4j interrupt noise


def _shows(cfg: Any, follower: Any, target: str, doc_id: str, marker: str) -> bool:
    if cfg.kind == "elasticsearch":
        from elasticsearch import Elasticsearch

        doc = Elasticsearch(cfg.url).get(index=f"{cfg.prefix}{target}", id=doc_id, realtime=True)
        return bool(doc["_source"].get("name") == marker)
    if cfg.kind == "redis":
        import redis

        return bool(redis.Redis.from_url(cfg.url).hget(f"{cfg.prefix}:{target}:{doc_id}", "name") == marker.encode())
    return doc_id in (held := follower.sink.held(target)) and held[doc_id][1].get("name") == marker


if __name__ == "__main__":
    sys.exit(main())
