"""``python -m bench.documents``: cdcsync's document follower against PGSync, on one shop, in one run.

Both tools keep the same document (``bench.documents_shop``: an order with
its customer, its lines each with its product, nested, and its tags' labels)
of the same tables in the same Elasticsearch, one after the other (cdcsync
first, its capture removed before PGSync is bootstrapped, so neither's
triggers, slot or connector cost the other anything), and each goes through
the same three phases (``bench.documents_phases``):

- **fill**: ``--roots`` orders already in the tables. cdcsync: the connector
  is applied and the bench waits until every table's snapshot is in Kafka,
  then runs ``cdcsync bootstrap`` (the mirror from the topics, every document
  once into a staged index, published), then starts ``cdcsync run`` (a
  subprocess, as the daemon runs, background verification off) for the other
  phases; PGSync: ``bootstrap``, then ``pgsync --daemon``, whose first sync
  is its fill. Timed from the process's start until the index counts every
  root: a JVM's and a first query's start-up included (``first_s`` says how
  long until the first document; ``per_s_after_first`` is the rate after it);
- **fan-out**: one product row held by ``FAN_OUT`` (200) orders updated,
  ``--fan-out-repeats`` times: commit -> the last of the 200 documents shows it;
- **steady**: ``--rate`` child changes a second (line quantities, each in
  another order) for ``--seconds``, with markers read back for freshness;
- **burst**: ``--burst`` such changes flat out: the documents/s either tool
  can sustain, which the steady phase's rate, kept up with, does not show.

Per phase, the peak RSS of each tool's process tree: for cdcsync the daemon's
Python, its Spark driver JVM and Spark's Python workers; for PGSync its one
process. PGSync reaches Elasticsearch through ``bench.pgsync_proxy`` (it
needs ``GET /``), which is not counted. PGSync is installed on first use
into a virtualenv of its own (``bench.pgsync_tool``).

Everything is named after a tag of the run and removed at the end, failure
or not: the Postgres schema (tables, PGSync's triggers, function and view),
the connector with its slot, publication and topics, the dead-letter topic,
the indexes, PGSync's slot and Redis queue, the temporary directory (kept,
and named, when the run failed: the logs are there).

Not a pass/fail test: the goals (initial fill >= 2x PGSync's documents/s,
fan-out and steady changes >= 10x, steady freshness p99 <= 2 s at 1k
changes/s, memory flat in the number of documents) are printed beside the
figures, not asserted.

Usage: python -m bench.documents [--roots 100000] [--fan-out-repeats 10] [--rate 1000] [--seconds 60]
[--burst 100000] [--tools cdcsync,pgsync] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from bench import documents_phases as phases
from bench import documents_shop as shop
from bench.common import ENV, REPO, free_port, say, stack, start_daemon, stop_daemon, stop_on_sigterm
from bench.documents_report import print_results

FILL_TIMEOUT_S = 3600


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--roots", type=int, default=100_000, help="orders, one document each")
    parser.add_argument("--fan-out-repeats", type=int, default=10, help="updates of the product 200 orders hold")
    parser.add_argument("--rate", type=int, default=1000, help="child changes a second in the steady phase")
    parser.add_argument("--seconds", type=float, default=60, help="length of the steady phase")
    parser.add_argument(
        "--burst", type=int, default=100_000, help="child changes flat out after the steady phase (0: none)"
    )
    parser.add_argument(
        "--drain", type=float, default=900, help="seconds to wait for the last marker of the steady phase and the burst"
    )
    parser.add_argument("--tools", default="cdcsync,pgsync", help="which tools, in this order")
    parser.add_argument(
        "--pgsync-venv", default=str(stack.STATE / "bench-pgsync-venv"), help="PGSync's virtualenv, made on first use"
    )
    parser.add_argument("--pgsync-redis-db", type=int, default=9, help="the Redis database of PGSync's queue")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t]
    if not set(tools) <= {"cdcsync", "pgsync"} or args.roots < shop.FAN_OUT + phases.MARKER_ORDERS:
        parser.error("--tools takes cdcsync and pgsync; --roots at least 210")
    stop_on_sigterm()

    from elasticsearch import Elasticsearch

    from cdcsync.sources.postgres.connection import connect as connect_postgres

    tag = f"docs{uuid.uuid4().hex[:6]}"
    schema = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-documents-"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    results: dict[str, Any] = {"roots": args.roots, "lines_per_order": shop.LINES, "tags_per_order": shop.TAGS,
                               "fan_out": shop.FAN_OUT, "commit": commit.stdout.strip(), "tools": {}}  # fmt: skip
    es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}", request_timeout=60)
    pg = connect_postgres(_source(tag, schema), autocommit=True)
    ok = False
    try:
        say(f"loading {args.roots:,} orders into schema {schema} (temporary directory {tmp}) ...")
        started = time.monotonic()
        for statement in shop.ddl(schema) + shop.load(schema, args.roots):
            pg.execute(statement)
        say(f"  loaded in {time.monotonic() - started:.0f} s: {shop.row_counts(args.roots)}")
        for tool in tools:
            run = _cdcsync if tool == "cdcsync" else _pgsync
            results["tools"][tool] = run(args, pg, es, tag, schema, tmp / tool)
        ok = True
    finally:
        pg.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        es.indices.delete(index=f"{tag}-*", allow_no_indices=True, ignore_unavailable=True)
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            say(f"logs kept in {tmp}")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(results)
    return 0


def _source(tag: str, schema: str) -> Any:
    from cdcsync.config import Config

    return Config.model_validate(shop.cdcsync_config(tag, schema, "")).sources[0]


def _phases(
    args: Any, pg: Any, es: Any, schema: str, index: str, pid: int, check: Any, tool: str, fill: bool = True
) -> dict[str, Any]:
    """Fill (unless done already), fan-out and steady against ``index``, with the peak RSS of ``pid``'s tree in
    each."""
    out: dict[str, Any] = {}
    rss = phases.PhaseRss(pid)
    try:
        if fill:
            rss.phase("fill")
            say(f"  fill: waiting for {args.roots:,} documents in {index} ...")
            out["fill"] = phases.fill(es, index, args.roots, check, FILL_TIMEOUT_S)
            say(f"  {out['fill']}")
        rss.phase("fan_out")
        out["fan_out"] = phases.fan_out(pg, es, schema, index, args.fan_out_repeats, check, 600)
        say(f"  {out['fan_out']}")
        rss.phase("steady")
        say(f"  steady: {args.rate:,} changes/s for {args.seconds:.0f} s ...")
        markers = phases.Markers(pg, es, schema, index, args.roots, tool)
        markers.start()
        try:
            out["steady"] = phases.steady(pg, markers, schema, args.roots, args.rate, args.seconds, check, args.drain)
            say(f"  {out['steady']}")
            if args.burst:
                rss.phase("burst")
                changes = min(args.burst, args.roots)
                say(f"  burst: {changes:,} changes flat out ...")
                out["burst"] = phases.burst(pg, markers, schema, args.roots, changes, check, args.drain)
                say(f"  {out['burst']}")
        finally:
            markers.stop()
    finally:
        for phase, peak in rss.stop().items():
            if phase in out:
                out[phase]["rss"] = peak
    return out


def _cdcsync(args: Any, pg: Any, es: Any, tag: str, schema: str, tmp: Path) -> dict[str, Any]:
    from cdcsync.config.file import load_config
    from cdcsync.connectors.apply import apply
    from cdcsync.connectors.topics import delete_topics
    from tests.support import drop_capture

    tmp.mkdir(parents=True)
    config_path = tmp / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(shop.cdcsync_config(tag, schema, str(tmp))))
    config = load_config(config_path)
    log = tmp / "run.log"
    daemon = None
    out: dict[str, Any] = {}
    try:
        say("cdcsync: applying the connector, waiting for every table's snapshot in Kafka ...")
        started = time.monotonic()
        apply(config)
        _wait_snapshot(config, shop.row_counts(args.roots))
        out["snapshot_s"] = round(time.monotonic() - started, 1)
        # The fill is `cdcsync bootstrap`, as PGSync's is its first sync: the mirror from the topics, then every
        # document once into a staged index, published; the daemon streams from where it stopped.
        say(f"  snapshot in Kafka after {out['snapshot_s']} s; `cdcsync bootstrap` (log {log})")
        boot = subprocess.Popen(
            [sys.executable, "-m", "cdcsync", "--config", str(config_path), "bootstrap", "search"],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip

        def booting() -> None:
            if boot.poll() not in (None, 0):
                raise SystemExit(f"`cdcsync bootstrap` exited ({boot.returncode}): {log.read_text()[-3000:]}")

        rss = phases.PhaseRss(boot.pid)
        rss.phase("fill")
        say(f"  fill: waiting for {args.roots:,} documents in {tag}-orders ...")
        out["fill"] = phases.fill(es, f"{tag}-orders", args.roots, booting, FILL_TIMEOUT_S)
        boot.wait(120)
        out["fill"]["rss"] = rss.stop()["fill"]
        say(f"  {out['fill']}; starting `cdcsync run`")
        daemon = start_daemon(config_path, log, "--metrics-port", str(free_port()))

        def check() -> None:
            if daemon is not None and daemon.poll() is not None:
                raise SystemExit(f"`cdcsync run` exited ({daemon.returncode}): {log.read_text()[-3000:]}")

        out |= _phases(args, pg, es, schema, f"{tag}-orders", daemon.pid, check, "cdcsync", fill=False)
    finally:
        stop_daemon(daemon)
        say("cdcsync: removing the connector, its slot, publication and topics, the dead-letter topic, the index")
        drop_capture(config)
        delete_topics(config, [f.dlq_topic for f in config.followers])
        es.indices.delete(index=f"{tag}-orders*", allow_no_indices=True, ignore_unavailable=True)
    return out


def _pgsync(args: Any, pg: Any, es: Any, tag: str, schema: str, tmp: Path) -> dict[str, Any]:
    from bench import pgsync_tool

    tmp.mkdir(parents=True)
    python = pgsync_tool.ensure_venv(Path(args.pgsync_venv))
    port = free_port()
    proxy = pgsync_tool.start_proxy(port, tmp / "proxy.log")
    index = f"{tag}-pgsync-orders"
    tool = pgsync_tool.PGSync(python, tmp, shop.pgsync_schema(schema, index), f"http://127.0.0.1:{port}",
                              args.pgsync_redis_db)  # fmt: skip
    out: dict[str, Any] = {"version": pgsync_tool.PGSYNC_VERSION}
    try:
        say(f"pgsync {pgsync_tool.PGSYNC_VERSION}: bootstrap (slot, triggers, function, view) ...")
        out["bootstrap_s"] = round(tool.bootstrap(), 1)
        say(f"  bootstrapped in {out['bootstrap_s']} s; starting `pgsync --daemon` (log {tool.log})")
        process = tool.start()
        out |= _phases(args, pg, es, schema, index, process.pid, tool.check, "pgsync")
    finally:
        say("pgsync: stopping it; removing its slot, triggers, view, function, Redis queue and index")
        tool.teardown(pg)
        pgsync_tool.stop_proxy(proxy)
        es.indices.delete(index=index, allow_no_indices=True, ignore_unavailable=True)
    return out


def _wait_snapshot(config: Any, counts: dict[str, int], timeout_s: float = 1800) -> None:
    """Until each table's topic holds at least its row count of records (the snapshot's reads)."""
    from confluent_kafka import Consumer, TopicPartition

    source = config.sources[0]
    topics = {source.topic(t): counts[t.table] for t in source.tables}
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}", "group.id": "bench-documents"})
    deadline = time.monotonic() + timeout_s
    try:
        while topics:
            for topic, wanted in list(topics.items()):
                meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
                if meta is None or meta.error is not None or not meta.partitions:
                    continue
                end = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                          for p in meta.partitions)  # fmt: skip
                if end >= wanted:
                    del topics[topic]
            if topics and time.monotonic() > deadline:
                raise SystemExit(f"snapshot: not all in Kafka after {timeout_s:.0f} s: {sorted(topics)}")
            time.sleep(1)
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
