"""`make demo`: load the sample databases, capture them, sync them into every store, and say where to look.

Runs with the project's virtualenv after `make up`. Idempotent: the sample SQL
only adds what is missing and `connectors apply` of an unchanged config is a
no-op, so running it twice is safe.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pymysql
from confluent_kafka import Consumer, TopicPartition

from cdcsync.config.file import load_config
from cdcsync.connectors.apply import apply, healthy, status

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import stack  # noqa: E402

ENV = stack.ENV


def load_samples() -> dict[str, int]:
    with psycopg.connect(
        host="127.0.0.1",
        port=int(ENV["PG_PORT"]),
        dbname=ENV["PG_DATABASE"],
        user=ENV["PG_USER"],
        password=ENV["PG_PASSWORD"],
        autocommit=True,
    ) as conn:
        conn.execute((HERE / "sample/postgres.sql").read_text())
        counts = {
            f"public.{t}": conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            for t in ("customers", "orders")
        }
    conn2 = pymysql.connect(
        host="127.0.0.1",
        port=int(ENV["MARIADB_PORT"]),
        user=ENV["MARIADB_USER"],
        password=ENV["MARIADB_PASSWORD"],
        database=ENV["MARIADB_DATABASE"],
        autocommit=True,
    )
    with conn2, conn2.cursor() as cur:
        for statement in (HERE / "sample/mariadb.sql").read_text().split(";"):
            if statement.strip():
                cur.execute(statement)
        cur.execute("SELECT count(*) FROM products")
        counts[f"{ENV['MARIADB_DATABASE']}.products"] = cur.fetchone()[0]  # type: ignore[index]
    return counts


def topic_size(consumer: Consumer, topic: str) -> int:
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    return high - low


def main() -> int:
    config = load_config(Path.cwd() / "cdcsync.yaml")
    print("==> loading the sample databases")
    rows = load_samples()
    print("==> applying connectors (cdcsync connectors apply)")
    for result in apply(config):
        print(f"  connector {result.connector}: {result.action}")
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": "cdcsync-demo"})
    topics = {s.topic(t): rows.get(str(t), 0) for s in config.sources for t in s.tables}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        sizes = {t: topic_size(consumer, t) for t in topics}
        if all(sizes[t] >= n for t, n in topics.items()) and healthy(status(config)):
            break
        time.sleep(1)
    else:
        print(
            f"error: capture did not catch up within 180s: {sizes}; see {stack.LOGS / 'connect.log'}", file=sys.stderr
        )
        return 1
    print("\n==> captured: source rows -> records in each compacted topic")
    for topic, n in topics.items():
        print(f"  {topic:<42} {n:>6} rows -> {sizes[topic]:>6} records")
    cdcsync = [sys.executable, "-m", "cdcsync", "--config", "cdcsync.yaml"]
    print("\n==> following into Elasticsearch, Redis and Delta Lake (cdcsync run --once)")
    if subprocess.run([*cdcsync, "run", "--once"], stderr=subprocess.DEVNULL).returncode:
        print("error: cdcsync run --once failed; run it by hand to see why", file=sys.stderr)
        return 1
    print("\n==> comparing every store with the source (cdcsync verify)")
    if subprocess.run([*cdcsync, "verify"]).returncode:
        return 1
    print(f"""
Where to look:
  cdcsync connectors status            connector and task state
  curl -s 127.0.0.1:{ENV["CONNECT_PORT"]}/connectors      Kafka Connect REST API
  make status                          every component, its port, pid and memory
  logs                                 {stack.LOGS}/
  Elasticsearch                        curl -s '127.0.0.1:{ENV["ES_PORT"]}/customers/_search?size=1&pretty'
  Redis                                redis-cli -p {ENV["REDIS_PORT"]} hgetall cdc:customers:1
  Delta Lake                           {stack.STATE}/warehouse/warehouse/<table>
  keep the stores in sync              cdcsync run   (metrics on 127.0.0.1:{ENV["METRICS_PORT"]}/metrics)
  change a row, then `cdcsync run --once` (or let the daemon apply it) and `cdcsync verify`:
    psql -h 127.0.0.1 -p {ENV["PG_PORT"]} -U {ENV["PG_USER"]} {ENV["PG_DATABASE"]}   (password {ENV["PG_PASSWORD"]})""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
