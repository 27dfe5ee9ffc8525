"""``python -m bench.partitions``: a follower's catch-up on a standalone Spark cluster, by partitions and workers.

Two sources capture the same Postgres table, one into a topic of 1 partition
and one into a topic of ``--partitions`` (4), so both topics hold the same
``--rows`` changes, keyed and partitioned by Kafka Connect as in production.
A Spark standalone master and two workers of ``--worker-cores`` each (1) are
started from the pyspark wheel, as ``deploy/spark/standalone.sh`` does. Then,
for one worker and for two (``spark.cores.max``: one executor, or one on
each worker), each topic is applied from offset 0 by a fresh Elasticsearch
follower ``--runs`` times (2), in one Spark application per worker count,
after a warm-up read of the topic through Python workers (``bench._warm_up``).

changes/s = changes / time spent in batches that carried data (Spark's own
trigger timings, as ``python -m bench`` counts a catch-up). The ratio of
interest is 4 partitions on two workers against 1 partition on one.

What to read into it on one machine: both workers share its cores with the
driver, Kafka and Elasticsearch, so a second worker adds task slots, not
cores. The CPU each catch-up used (``bench.cpu``) is printed beside it: the
machine's share busy says how far one machine lets a second worker help.

Not a pass/fail test. Usage: python -m bench.partitions [--rows 200000] [--partitions 4] [--runs 2]
[--worker-cores 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench import cpu
from bench.common import ENV, empty_stores, one_table_doc, say, stop_on_sigterm

MASTER_PORT, MASTER_UI = 17177, 18190  # clear of the stack's ports and of the cluster test's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows inserted: changes in each topic")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the second topic")
    parser.add_argument("--runs", type=int, default=2, help="catch-ups per topic and worker count")
    parser.add_argument("--worker-cores", type=int, default=1, help="cores of each of the two workers")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    if args.partitions < 2:
        parser.error("--partitions: 2 or more (the other topic has 1)")
    stop_on_sigterm()

    from cdcsync.config import Config
    from cdcsync.connectors.apply import apply
    from cdcsync.sources.postgres.connection import connect as connect_postgres

    tag = f"part{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-partitions-"))
    counts = (1, args.partitions)
    workers = (1, 2)
    followers = [
        _follower(tag, tmp, f"w{w}p{p}r{run}", f"{tag}p{p}", table)
        for w in workers
        for p in counts
        for run in range(1, args.runs + 1)
    ]
    doc = one_table_doc(tag, table, followers, tmp, heartbeat_interval_ms=1000)
    first = doc["sources"][0]
    doc["sources"] = [{**first, "name": f"{tag}p{p}", "topic_partitions": p} for p in counts]
    config = Config.model_validate(doc)
    topics = {p: s.topic(s.tables[0]) for p, s in zip(counts, config.sources, strict=True)}
    pg = connect_postgres(config.sources[0], autocommit=True)
    pg.execute(
        f"CREATE TABLE {table} (id int PRIMARY KEY, name text, qty int, price numeric(10,2), "
        "updated_at timestamptz DEFAULT now())"
    )
    results: dict[str, Any] = {"rows": args.rows, "partitions": args.partitions, "worker_cores": args.worker_cores}
    cluster: list[subprocess.Popen[bytes]] = []
    try:
        apply(config)
        _fill(pg, config, table, topics, args.rows)
        cluster = _start_cluster(tmp, args.worker_cores)
        runs: dict[str, list[dict[str, Any]]] = {}
        for w in workers:
            runs.update(_on_workers(config, w * args.worker_cores, w, counts, args.runs, topics))
        results["runs"] = runs
        base = _median([r["per_s"] for r in runs[_key(1, 1)]])
        results["ratios"] = {k: round(_median([r["per_s"] for r in v]) / base, 2) for k, v in runs.items()}
    finally:
        for process in reversed(cluster):
            process.terminate()
        for process in cluster:
            process.wait(timeout=60)
        _cleanup(config, tag, table, pg)
        shutil.rmtree(tmp, ignore_errors=True)  # checkpoints, the workers' logs and work dirs
    _report(results, args)
    return 0


def _follower(tag: str, tmp: Path, case: str, source: str, table: str) -> dict[str, Any]:
    """An Elasticsearch follower of ``source``'s table alone, with its own indexes and checkpoint."""
    return {
        "name": case,
        "kind": "elasticsearch",
        "url": f"http://127.0.0.1:{ENV['ES_PORT']}",
        "prefix": f"{tag}-{case}-",
        "dead_letter_topic": f"dlq.{tag}.{case}",
        "checkpoint_dir": str(tmp / f"ckpt-{case}"),
        "tables": [f"{source}.public.{table}"],
        "mappings": {f"public.{table}": {"target": "rows"}},
    }


def _key(workers: int, partitions: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}, {partitions} partition{'s' if partitions > 1 else ''}"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _fill(pg: Any, config: Any, table: str, topics: dict[int, str], rows: int) -> None:
    """Insert ``rows`` rows and wait until each topic holds every change."""
    from confluent_kafka import Consumer, TopicPartition

    say(f"capture: {rows:,} rows into Postgres, captured by two sources ...")
    for low in range(1, rows + 1, 1000):
        pg.execute(
            f"INSERT INTO {table} (id, name, qty, price) SELECT g, 'name ' || g, g % 100, g % 1000 / 7.0 "
            f"FROM generate_series({low}, {min(low + 999, rows)}) g"
        )
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": f"{table}-fill"})
    deadline = time.monotonic() + 900
    try:
        for partitions, topic in topics.items():
            while (
                held := sum(
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
                )
            ) < rows:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}: {held:,} of {rows:,} changes after 900 s")
                time.sleep(0.5)
            say(f"capture: {topic} holds {rows:,} changes in {partitions} partition(s)")
    finally:
        consumer.close()


def _master_workers() -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=5) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except OSError:
        return None


def _start_cluster(tmp: Path, cores: int) -> list[subprocess.Popen[bytes]]:
    """A master and two workers of ``cores`` each, from the pyspark wheel, as ``deploy/spark/standalone.sh``."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    logs = tmp / "spark-cluster"
    logs.mkdir()
    env = {**os.environ, "SPARK_LOG_DIR": str(logs), "SPARK_WORKER_DIR": str(logs / "work")}
    master = f"spark://127.0.0.1:{MASTER_PORT}"
    parts = [
        ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(MASTER_PORT),
                    "--webui-port", str(MASTER_UI)], 0),
        *((f"worker{n}", ["org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1", "--cores",
                          str(cores), "--memory", "1g", "--webui-port", str(MASTER_UI + n)], n) for n in (1, 2)),
    ]  # fmt: skip
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, command, alive in parts:
            out = (logs / f"{name}.log").open("wb")
            command = [str(spark_class), *command]
            started.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env))
            deadline = time.monotonic() + 120
            while (seen := _master_workers()) is None or seen < alive:
                if started[-1].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"spark {name} not up: {(logs / f'{name}.log').read_text()[-3000:]}")
                time.sleep(1)
        say(f"spark: master {master} and two workers of {cores} core(s) up")
        return started
    except BaseException:
        for process in started:
            process.terminate()
        raise


def _on_workers(
    config: Any, cores: int, workers: int, counts: tuple[int, ...], runs: int, topics: dict[int, str]
) -> dict[str, list[dict[str, Any]]]:
    """One application with ``cores`` executor cores in all (one executor per worker): each topic's catch-ups."""
    from bench.__main__ import _warm_up
    from cdcsync.spark import spark_session

    spark = spark_session(
        f"cdcsync-bench-partitions-{workers}",
        f"spark://127.0.0.1:{MASTER_PORT}",
        {"spark.cores.max": str(cores), "spark.executor.memory": "768m"},
        config=config,
    )
    try:
        deadline = time.monotonic() + 120
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 < workers:  # the driver is one
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {workers} executor(s) registered within 120 s")
            time.sleep(1)
        _warm_up(spark, config, topics[counts[-1]])
        found: dict[str, list[dict[str, Any]]] = {}
        for partitions in counts:
            rates = found.setdefault(_key(workers, partitions), [])
            for run in range(1, runs + 1):
                cfg = next(f for f in config.followers if f.name == f"w{workers}p{partitions}r{run}")
                rates.append(_catch_up(spark, config, cfg))
        return found
    finally:
        spark.stop()


def _catch_up(spark: Any, config: Any, cfg: Any) -> dict[str, Any]:
    """A fresh follower applies its topic from offset 0: changes/s over the batches that carried data, the
    machine's share busy meanwhile and the cores each part used (the executors' JVMs are in ``other``)."""
    from elasticsearch import Elasticsearch

    from cdcsync.sync.build import build_follower
    from cdcsync.sync.stream import start_query

    follower = build_follower(config, cfg, spark)
    started, before = time.perf_counter(), cpu.sample()
    query = start_query(spark, config, cfg, follower, once=True)
    query.awaitTermination()
    total_s, used = time.perf_counter() - started, cpu.cores(before, cpu.sample())
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    records = sum(p["numInputRows"] for p in progress)
    batch_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000 or total_s
    rate = records / batch_s
    index = f"{cfg.prefix}rows"
    held = Elasticsearch(cfg.url).count(index=index)["count"]
    if held != records:  # every change of the topic is an insert of its own row
        raise RuntimeError(f"[{cfg.name}] {index} holds {held:,} documents after {records:,} changes")
    busy = round(sum(v for k, v in used.items() if not k.startswith("spark jvm: ")) / (os.cpu_count() or 1), 2)
    say(f"[{cfg.name}] {records:,} changes in {batch_s:.1f} s of batches: {rate:,.0f}/s; cpu {cpu.summary(used)}")
    return {"per_s": round(rate), "busy": busy, "cores": used}


def _cleanup(config: Any, tag: str, table: str, pg: Any) -> None:
    from cdcsync.connectors.remove import delete
    from cdcsync.connectors.topics import delete_topics

    for source in config.sources:
        delete(config, source.name, topics=True, force=True)
    pg.execute(f"DROP TABLE IF EXISTS {table}")
    delete_topics(config, [f.dlq_topic for f in config.followers])
    empty_stores(tag)


def _report(results: dict[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"\nElasticsearch follower catch-up of {results['rows']:,} changes on a standalone cluster, "
        f"workers of {results['worker_cores']} core(s) (changes/s, each run; ratio of the medians to "
        "1 worker, 1 partition):"
    )
    for key, runs in results["runs"].items():
        rates = ", ".join(f"{r['per_s']:,}" for r in runs)
        busy = ", ".join(str(r["busy"]) for r in runs)
        print(f"  {key:<26} {rates:<24} {results['ratios'][key]}x   machine busy {busy}")


if __name__ == "__main__":
    sys.exit(main())
