"""``make bench`` (bootstrap part): a large table bootstrapped into Elasticsearch and Redis, and the naive ceiling.

Measured in one run, on one table of N rows (default 1M) in Postgres, per sink:

- **ceiling**: Postgres ``COPY ... TO STDOUT`` read with psycopg, every row
  written straight into a default index (``helpers.bulk``, 1000 per request)
  or Redis database (a pipeline of HSETs, 1000 per round trip) by one
  thread with the client library; no snapshot, no versions, no Spark. For
  the warehouse, a plain Spark job: the table's topic read whole, the last
  record per key kept, its ``after`` parsed, one Delta table written;
- **--from source**: ``bootstrap --from source`` as the command runs it:
  exported snapshot, Spark JDBC in parallel pieces, mapping, versioned writes
  into a staged generation, the log window, the publish, the recorded start;
- **--from topics**: ``bootstrap --from topics``: the connector's snapshot
  of the table read back from its topic, versioned writes into a staged
  store, the publish.

Each phase starts on empty stores (the previous phases' indexes and keys
removed) with Redis's append-only file just rewritten: a publish scans the
whole Redis database, and an AOF rewrite landed in whichever phase crossed
its threshold. rows/s = N / wall time of each, and the ratio to the ceiling.
Each also gets its CPU per row across the stack and the ratio it could reach
with every core busy at that cost (``bench.cpu.budget``). Not a pass/fail test.
Usage: python -m bench.bootstrap [--rows N] [--sinks search,cache,warehouse] [--origins source,topics]
    [--no-merge-baseline] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import cpu
from bench.common import ENV, cleanup, empty_stores, one_table_config, say

SINK_KINDS = {"search": "elasticsearch", "cache": "redis", "warehouse": "delta"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--sinks", default="search,cache", help="search (Elasticsearch), cache (Redis), warehouse (Delta)"
    )
    parser.add_argument("--origins", default="source,topics", help="what the bootstrap reads")
    parser.add_argument("--partitions", type=int, default=2, help="parallel JDBC reads (--from source)")
    parser.add_argument(
        "--merge-baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="warehouse: also bootstrap from the topics MERGEing batch by batch, the earlier way",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.connectors.apply import apply
    from cdcsync.snapshot.bootstrap import bootstrap_from_topics
    from cdcsync.snapshot.replay import capture, progress_bar
    from cdcsync.snapshot.source import bootstrap_from_source
    from cdcsync.sources.postgres.connection import connect as connect_postgres
    from cdcsync.spark import spark_session
    from cdcsync.state import base_dir
    from cdcsync.sync.build import build_follower
    from cdcsync.sync.stream import checkpoint_dir

    tag = f"bboot{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-boot-"))
    sinks, origins = args.sinks.split(","), args.origins.split(",")
    followers = [
        {
            "name": f"{sink}_{origin}",
            "kind": SINK_KINDS[sink],
            **({"path": str(tmp / f"warehouse-{origin}")} if sink == "warehouse" else {
                "url": _url(sink), "prefix": f"{tag}{origin}-" if sink == "search" else f"{tag}{origin}"}),
            "dead_letter_topic": f"dlq.{tag}.{sink}_{origin}",
            "checkpoint_dir": str(tmp / f"ckpt-{sink}-{origin}"),
        }
        for sink in sinks
        for origin in origins
    ]  # fmt: skip
    # The connector's own snapshot fills the topic for --from topics; --from source alone needs none of it.
    snapshot_mode = "initial" if "topics" in origins else "no_data"
    config = one_table_config(tag, table, followers, tmp, snapshot_mode=snapshot_mode)
    pg = connect_postgres(config.sources[0], autocommit=True)
    topic = config.sources[0].topic(config.sources[0].tables[0])
    results: dict[str, Any] = {"rows": args.rows, "partitions": args.partitions}
    try:
        say(f"loading {args.rows:,} rows into {table} ...")
        pg.execute(
            f"CREATE TABLE {table} (id int PRIMARY KEY, name text, qty int, price numeric(10,2), "
            "updated_at timestamptz DEFAULT now())"
        )
        pg.execute(
            f"INSERT INTO {table} (id, name, qty, price) SELECT g, 'item-' || g, g % 100, (g % 1000) / 10.0 "
            f"FROM generate_series(1, {args.rows}) g"
        )
        pg.execute(f"VACUUM ANALYZE {table}")
        apply(config)
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:  # running, and (for --from topics) the snapshot all in the topic
            held = sum(high - low for low, high in capture(config, [topic]).values())
            if held >= (args.rows if "topics" in origins else 0) and _running(config, tag):
                break
            time.sleep(2)
        else:
            raise SystemExit(f"the connector did not put {args.rows:,} rows in {topic} within 1800 s")

        spark = spark_session("cdcsync-bench-bootstrap", class_archive=True)  # as `cdcsync bootstrap` starts it
        for sink in sinks:
            empty_stores(tag)  # each timed phase starts on empty stores, with Redis's AOF just rewritten
            say(f"[{sink}] ceiling: COPY out + raw writes in ...")
            before = cpu.sample()
            ceiling_s = (_delta_ceiling(spark, config, topic, str(tmp / "warehouse-raw")) if sink == "warehouse"
                         else _ceiling(sink, pg, table, f"{tag}raw"))  # fmt: skip
            entry: dict[str, Any] = {
                "ceiling_rows_per_s": round(args.rows / ceiling_s),
                "ceiling_s": round(ceiling_s, 1),
                "ceiling_cpu_cores": cpu.cores(before, cpu.sample()),
            }
            entry["ceiling_cpu"] = cpu.budget(entry["ceiling_cpu_cores"], ceiling_s, args.rows)
            say(f"[{sink}] ceiling: {entry['ceiling_rows_per_s']:,} rows/s; cpu (cores): "
                f"{cpu.summary(entry['ceiling_cpu_cores'])}")  # fmt: skip
            say(f"[{sink}] ceiling: {cpu.budget_line(entry['ceiling_cpu'], 'row')}")
            merged = ["merge"] if sink == "warehouse" and "topics" in origins and args.merge_baseline else []
            for origin in [*origins, *merged]:
                cfg = next(f for f in config.followers if f.name == f"{sink}_{origin.replace('merge', 'topics')}")
                say(f"[{sink}] bootstrap --from {origin} ...")
                empty_stores(tag)
                _remove_tree(cfg.path)
                follower = build_follower(config, cfg, spark, open_sink=False, fill=True)
                follower.sink.spooled_fill = origin != "merge"  # type: ignore[attr-defined]
                started, before = time.perf_counter(), cpu.sample()
                if origin == "source":
                    summary = bootstrap_from_source(config, cfg, follower, spark, checkpoint_dir(config, cfg),
                                                    base_dir(config), args.partitions, progress_bar)  # fmt: skip
                else:
                    summary = bootstrap_from_topics(config, cfg, follower, checkpoint_dir(config, cfg),
                                                    base_dir(config), progress_bar)  # fmt: skip
                seconds = time.perf_counter() - started
                follower.sink.close()
                if summary.applied < args.rows:
                    raise SystemExit(f"{cfg.name}: applied {summary.applied:,} of {args.rows:,} rows")
                entry[origin] = {
                    "rows_per_s": round(args.rows / seconds),
                    "seconds": round(seconds, 1),
                    "ratio": round(ceiling_s / seconds, 2),
                    "cpu_cores": cpu.cores(before, cpu.sample()),
                }
                done = entry[origin]
                done["cpu"] = cpu.budget(done["cpu_cores"], seconds, args.rows)
                done["bound_ratio"] = round(done["cpu"]["bound_per_s"] / entry["ceiling_rows_per_s"], 2)
                say(f"[{sink}] --from {origin}: {done['rows_per_s']:,} rows/s, {done['seconds']} s, "
                    f"ratio {done['ratio']}; cpu (cores): {cpu.summary(done['cpu_cores'])}")  # fmt: skip
                say(f"[{sink}] --from {origin}: {cpu.budget_line(done['cpu'], 'row')} ({done['bound_ratio']} of the "
                    "ceiling)")  # fmt: skip
            results[sink] = entry
        spark.stop()
    finally:
        cleanup(config, tag, table, pg)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"bootstrap of {args.rows:,} rows ({args.partitions} JDBC pieces at a time for --from source)")
    print(
        f"{'sink':<8} {'ceiling rows/s':>15} "
        + " ".join(f"{'--from ' + o + ' rows/s':>22} {'ratio':>6}" for o in origins)
    )
    for sink in sinks:
        e = results[sink]
        cells = " ".join(f"{e[o]['rows_per_s']:>22,} {e[o]['ratio']:>6}" for o in origins)
        print(f"{sink:<8} {e['ceiling_rows_per_s']:>15,} {cells}")
        if "merge" in e and "topics" in e:
            print(f"{'':<8} --from topics MERGEd batch by batch: {e['merge']['rows_per_s']:,} rows/s; the load "
                  f"{e['topics']['rows_per_s'] / e['merge']['rows_per_s']:.1f}x that")  # fmt: skip
    print("CPU per row (us, every part of the stack), the machine's share busy, and the ratio at every core busy:")
    for sink in sinks:
        e = results[sink]
        cells = ";  ".join(
            f"--from {o} {e[o]['cpu']['us_total']} us, busy {e[o]['cpu']['busy']}, bound {e[o]['bound_ratio']}"
            for o in origins
        )
        print(f"{sink:<8} ceiling {e['ceiling_cpu']['us_total']} us, busy {e['ceiling_cpu']['busy']};  {cells}")
    return 0


def _url(sink: str) -> str:
    if sink == "search":
        return f"http://127.0.0.1:{ENV['ES_PORT']}"
    return f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0"


def _ceiling(sink: str, pg: Any, table: str, name: str) -> float:
    """COPY out and write every row by one thread with the client library; seconds."""
    started = time.perf_counter()

    def rows() -> Any:
        with pg.cursor() as cur, cur.copy(f"COPY {table} TO STDOUT") as copy:
            for id_, name_, qty, price, updated_at in copy.rows():
                yield id_, {"id": int(id_), "name": name_, "qty": int(qty), "price": price, "updated_at": updated_at}

    if sink == "search":
        from elasticsearch import Elasticsearch, helpers

        es = Elasticsearch(_url(sink), request_timeout=120)
        es.indices.create(index=f"{name}-search")  # a default index
        helpers.bulk(es, ({"_index": f"{name}-search", "_id": i, "_source": d} for i, d in rows()), chunk_size=1000)
        es.indices.refresh(index=f"{name}-search")
    else:
        import redis

        pipe = redis.Redis.from_url(_url(sink)).pipeline(transaction=False)
        for n, (i, d) in enumerate(rows(), 1):
            pipe.hset(f"{name}:{i}", mapping={k: str(v) for k, v in d.items()})
            if n % 1000 == 0:
                pipe.execute()
        pipe.execute()
    return time.perf_counter() - started


def _delta_ceiling(spark: Any, config: Any, topic: str, path: str) -> float:
    """A plain Spark job: the topic read whole, the last record per key, its row parsed, one Delta write; seconds."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    started = time.perf_counter()
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    last = records.withColumn("n", F.row_number().over(Window.partitionBy("key").orderBy(F.col("offset").desc())))
    after = "struct<id:int,name:string,qty:int,price:string,updated_at:string>"
    rows = last.where("n = 1 AND value IS NOT NULL").select(
        F.from_json(F.col("value").cast("string"), f"struct<after:{after}>").alias("v")
    )
    price = F.col("v.after.price").cast("decimal(10,2)").alias("price")
    updated_at = F.col("v.after.updated_at").cast("timestamp").alias("updated_at")
    rows = rows.select("v.after.id", "v.after.name", "v.after.qty", price, updated_at).where("id IS NOT NULL")
    rows.write.format("delta").mode("overwrite").save(path)
    return time.perf_counter() - started


def _remove_tree(path: str | None) -> None:
    import shutil

    if path:
        shutil.rmtree(path, ignore_errors=True)


def _running(config: Any, name: str) -> bool:
    from cdcsync.connectors.apply import client_for

    tasks = (client_for(config).status(name) or {}).get("tasks") or []
    return bool(tasks) and all(t.get("state") == "RUNNING" for t in tasks)


if __name__ == "__main__":
    sys.exit(main())
