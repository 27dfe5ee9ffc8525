"""``make bench`` (bootstrap part): `bootstrap --from source` of a large table into Elasticsearch.

Measured in one run, on one table of N rows (default 1M) in Postgres:

- **ceiling**: Postgres ``COPY ... TO STDOUT`` read with psycopg, every row
  bulk-indexed straight into a plain index with the client library
  (``helpers.bulk``); no snapshot, no versions, no Spark;
- **bootstrap**: ``cdcsync bootstrap search --from source`` as the command runs
  it: exported snapshot, Spark JDBC in parallel chunks, mapping, versioned bulk
  writes, the log window, the recorded start position.

rows/s = N / wall time of each, and their ratio. Not a pass/fail test.
Usage: python -m bench.bootstrap [--rows N] [--partitions P] [--json]
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

from bench.common import ENV, cleanup, one_table_config, say


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2, help="parallel JDBC reads")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)

    from cdcsync.connectors.apply import apply, client_for
    from cdcsync.db import connect_postgres
    from cdcsync.snapshot.bootstrap import progress_bar
    from cdcsync.snapshot.source import bootstrap_from_source
    from cdcsync.spark import spark_session
    from cdcsync.sync.stream import base_dir, build_follower, checkpoint_dir

    tag = f"bboot{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-boot-"))
    es_url = f"http://127.0.0.1:{ENV['ES_PORT']}"
    follower = {
        "name": "search",
        "kind": "elasticsearch",
        "url": es_url,
        "prefix": f"{tag}-",
        "dead_letter_topic": f"dlq.{tag}.search",
        "checkpoint_dir": str(tmp / "ckpt"),
    }
    config = one_table_config(tag, table, [follower], tmp, snapshot_mode="no_data")
    pg = connect_postgres(config.sources[0], autocommit=True)
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
        _wait_running(client_for(config), tag)

        say("ceiling: COPY out + raw bulk in ...")
        results["ceiling_s"] = round(_ceiling(pg, table, es_url, f"{tag}-raw"), 2)

        say("bootstrap --from source ...")
        spark = spark_session("cdcsync-bench-bootstrap")
        cfg = config.followers[0]
        follower = build_follower(config, cfg, spark, open_sink=False)
        started = time.perf_counter()
        summary = bootstrap_from_source(
            config, cfg, follower, spark, checkpoint_dir(config, cfg), base_dir(config), args.partitions, progress_bar
        )
        results["bootstrap_s"] = round(time.perf_counter() - started, 2)
        results["bootstrap_applied"] = summary.applied
        spark.stop()
    finally:
        cleanup(config, tag, table, pg)
    results["ceiling_rows_per_s"] = round(args.rows / results["ceiling_s"])
    results["bootstrap_rows_per_s"] = round(args.rows / results["bootstrap_s"])
    results["ratio"] = round(results["bootstrap_rows_per_s"] / results["ceiling_rows_per_s"], 2)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"bootstrap of {args.rows:,} rows into Elasticsearch ({args.partitions} JDBC partitions)")
        print(f"  ceiling (COPY + raw bulk):  {results['ceiling_rows_per_s']:>9,} rows/s  ({results['ceiling_s']} s)")
        print(
            f"  bootstrap --from source:    {results['bootstrap_rows_per_s']:>9,} rows/s  ({results['bootstrap_s']} s)"
        )
        print(f"  ratio: {results['ratio']}")
    return 0


def _ceiling(pg: Any, table: str, es_url: str, index: str) -> float:
    from elasticsearch import Elasticsearch, helpers

    es = Elasticsearch(es_url, request_timeout=120)
    es.indices.create(index=index, settings={"number_of_shards": 1, "number_of_replicas": 0})
    started = time.perf_counter()

    def actions() -> Any:
        with pg.cursor() as cur, cur.copy(f"COPY {table} TO STDOUT") as copy:
            for id_, name, qty, price, updated_at in copy.rows():
                doc = {"id": int(id_), "name": name, "qty": int(qty), "price": price, "updated_at": updated_at}
                yield {"_index": index, "_id": id_, "_source": doc}

    helpers.bulk(es, actions(), chunk_size=1000)
    es.indices.refresh(index=index)
    return time.perf_counter() - started


def _wait_running(client: Any, name: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = client.status(name) or {}
        tasks = status.get("tasks") or []
        if tasks and all(t.get("state") == "RUNNING" for t in tasks):
            return
        time.sleep(1)
    raise RuntimeError(f"connector {name} not running after 120 s")


if __name__ == "__main__":
    sys.exit(main())
