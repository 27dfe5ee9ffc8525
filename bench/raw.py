"""Raw sink ceilings for a window of the log: each sink alone, then the three at once, on the same documents.

A follower cannot write faster than its sink's client library writing the
same documents straight in, with no Kafka, no versions, no Spark batches:
that is the raw ceiling (the same writes as ``bench``'s: an Elasticsearch
bulk of 1,000 into a one-shard index, a Redis pipeline of 1,000 HSETs, one
Delta append). The daemon runs the three followers at once on the same
cores, so their live throughput together is bounded by the three raw writers
run *at once*, which this module measures next to each one alone.

One process per sink (``python -m bench.raw CONFIG FOLLOWER TOPIC START END``)
reads the window ``[START, END)`` of the topic, maps it as the follower
does, and then writes it on each ``go NAME`` line of its standard input into
a fresh store named ``NAME``, answering ``done SECONDS``; reading, mapping and
a Delta writer's Spark session are not timed. ``ceilings`` drives the three:
a first write each (warm-up, not counted: the Delta writer's first append in
a new JVM took twice as long as its second), then each alone, then the
three at once.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import ENV, say


def ceilings(config_path: Path, followers: list[str], topic: str, start: int, end: int) -> dict[str, Any]:
    """Changes/s of each follower's raw writer alone, and of the three at once (the slowest one's time)."""
    changes = end - start
    workers = {
        name: subprocess.Popen(
            [sys.executable, "-m", "bench.raw", str(config_path), name, topic, str(start), str(end)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        for name in followers
    }
    try:
        for name, proc in workers.items():
            _answer(name, proc, "ready")
        say(f"raw writers: {changes:,} changes read and mapped for {', '.join(followers)}; a first write each ...")
        for name, proc in workers.items():  # the first write pays the JVM's and the client's warm-up
            _write(name, proc, "warm-up")
        alone = {}
        for name, proc in workers.items():
            alone[name] = changes / _write(name, proc, "alone")
            say(f"  raw {name} alone: {alone[name]:,.0f} changes/s")
        for name, proc in workers.items():
            _send(name, proc, "together")
        seconds = {name: float(_answer(name, proc, "done")) for name, proc in workers.items()}
        out: dict[str, Any] = {f"{name}_alone_per_s": round(rate) for name, rate in alone.items()}
        out |= {f"{name}_at_once_per_s": round(changes / s) for name, s in seconds.items()}
        out["three_at_once_per_s"] = round(changes / max(seconds.values()))
        say(f"  raw, the three at once: {out['three_at_once_per_s']:,} changes/s")
        return out
    finally:
        for proc in workers.values():
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()


def _send(name: str, proc: subprocess.Popen[str], store: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(f"go {store}\n")
    proc.stdin.flush()


def _write(name: str, proc: subprocess.Popen[str], store: str) -> float:
    _send(name, proc, store)
    return float(_answer(name, proc, "done"))


def _answer(name: str, proc: subprocess.Popen[str], word: str) -> str:
    """The rest of the worker's next line, which must start with ``word``."""
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != word:
        raise SystemExit(f"raw writer {name}: expected {word!r}, got {line!r} (exit code {proc.poll()})")
    return line[1] if len(line) > 1 else ""


def documents(
    config: Any, follower: Any, topic: str, start: int = 0, end: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The window's changes (to the log's end by default), mapped as the follower does, in the sink's stored form.

    Deletes are left out: a raw writer only writes documents.
    """
    from confluent_kafka import Consumer, TopicPartition

    from cdcsync.events import parse_record
    from cdcsync.sync.mapping import map_row

    consumer = Consumer(
        {
            "bootstrap.servers": config.kafka.bootstrap_servers,
            "group.id": f"raw-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    if end is None:
        end = int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    docs, offset = [], start
    while offset < end:
        for msg in consumer.consume(5000, timeout=1):
            if msg.error():
                continue
            offset = msg.offset() + 1
            if msg.offset() >= end:
                continue
            change = parse_record(topic, 0, msg.offset(), msg.key(), msg.value())
            row = None if change is None else map_row(change, follower.mappings[topic])
            if row is not None and row.doc is not None:
                docs.append((row.doc_id, follower.sink.stored_form(row.doc)))
    consumer.close()
    return docs


def writer(kind: str, docs: list[tuple[str, dict[str, Any]]], base: Path, spark: Any) -> Any:
    """A function writing ``docs`` into a fresh store named by its argument (a Delta table: a directory in ``base``).

    The Delta writer's rows are put in the JVM here, before its clock starts.
    """
    if kind == "elasticsearch":
        from elasticsearch import Elasticsearch, helpers

        es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}", request_timeout=120)

        def search(name: str) -> None:
            es.indices.create(index=name, settings={"number_of_shards": 1, "number_of_replicas": 0})
            helpers.bulk(es, ({"_index": name, "_id": i, "_source": d} for i, d in docs), chunk_size=1000)
            es.indices.refresh(index=name)

        return search
    if kind == "redis":
        import redis

        pipe = redis.Redis(port=int(ENV["REDIS_PORT"])).pipeline(transaction=False)

        def cache(name: str) -> None:
            for n, (i, d) in enumerate(docs, 1):
                pipe.hset(f"{name}:{i}", mapping={k: str(v) for k, v in d.items()})
                if n % 1000 == 0:
                    pipe.execute()
            pipe.execute()

        return cache
    frame = spark.createDataFrame([{k: str(v) for k, v in d.items()} | {"_id": i} for i, d in docs]).cache()
    frame.count()  # the rows in the JVM before the clock starts: the append is what is timed

    def warehouse(name: str) -> None:
        frame.write.format("delta").save(str(base / name))

    return warehouse


def main(argv: list[str]) -> int:
    from cdcsync.config.file import load_config
    from cdcsync.sync.build import build_follower

    config_path, name, topic, start, end = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    config = load_config(Path(config_path))
    cfg = next(f for f in config.followers if f.name == name)
    spark = None
    if cfg.kind == "delta":
        from cdcsync.spark import spark_session

        spark = spark_session(f"bench-raw-{name}")
    follower = build_follower(config, cfg, spark, open_sink=False)
    write = writer(cfg.kind, documents(config, follower, topic, start, end), Path(config_path).parent, spark)
    prefix = cfg.prefix or ""
    print("ready", flush=True)
    for line in sys.stdin:
        store = f"{prefix}raw-{line.split()[1]}"
        started = time.perf_counter()
        write(store)
        print(f"done {time.perf_counter() - started:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
