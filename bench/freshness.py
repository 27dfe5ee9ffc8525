"""``python -m bench.freshness``: source commit -> visible, read back from each store while ``cdcsync run`` follows.

``cdcsync run`` (three followers: Elasticsearch, Redis, Delta; the default
settings) follows one Postgres table while a writer commits updates at a
steady rate, one phase per ``--rates`` entry (1k and 5k changes/s by
default, ``--seconds`` each), then one phase flat out (``--burst`` updates as
fast as Postgres takes them).

**Warm-up.** A daemon runs for days; its first minutes are not its steady
state. The Spark JVM keeps compiling hot code for several minutes after it
starts, and every batch is slower meanwhile: at 1k changes/s its JIT
compilers took 0.34-0.43 of the two cores two to five minutes in, and 0.07
after ten, when the warehouse's batches had gone from ~5.5 s to ~2.6 s
(docs/performance.md, "Generated code"). So the writer first runs at the
first rate until the JIT has settled: the warm-up ends with the first minute,
at least ``WARM_UP_MIN_S`` in, in which the JVM's compiler threads used less
than ``--settled`` cores (0.1), and after ``--warm-up`` seconds (900) in any
case. It is reported as its own phase, with its length; the phases after it
are the steady state. ``--settled 0`` makes the warm-up ``--warm-up``
seconds long.

**Markers.** Once a second the writer commits ``name = 'mark:<n>'`` to the
row with id 0 and notes the time the commit returned. One poller per store
reads that row as a reader would, every 50 ms: Elasticsearch by a
near-real-time get (what a search sees: after a refresh), Redis by HGET,
Delta by reading the Parquet files each new commit of the table's log adds.
A marker's freshness is the time it was first seen minus its commit time; a
marker overwritten before a poll saw it counts as seen with the next one.

**After a quiet spell.** ``--quiet N`` (3) markers, each committed after
``--quiet-s`` seconds (75) in which nothing changed: the freshness of a quiet
table's next change. Spark stops a Python worker that has been idle for a
minute, so that change's batch starts its workers afresh (docs/performance.md,
"Python workers forked warm"). Its markers are reported apart, not in the
steady phases' quantiles.

**The daemon's histogram.** ``cdcsync_apply_latency_seconds`` is scraped
from ``/metrics`` at the start and end of each phase; its quantiles are
interpolated within the buckets of the difference, as Prometheus'
``histogram_quantile`` does. It measures commit -> written; the markers
measure commit -> readable, so Elasticsearch's refresh is in the markers
only.

**Where a batch's time goes.** The daemon runs with
``CDCSYNC_SPARK_PROGRESS_LOG_LEVEL=INFO``, so Spark logs each micro-batch's
progress (one JSON object per batch and follower). Per phase and follower the
bench prints the batches' median duration by Spark's phases
(``latestOffset``: asking Kafka for the end offsets; ``queryPlanning``;
``addBatch``: cdcsync's batch function, the apply itself; ``walCommit`` and
``commitOffsets``: the checkpoint's two writes) and the median time from one
batch's start to the next.

**CPU.** Per phase, the cores each part of the stack used (``bench.cpu``,
from ``/proc``), the Spark JVM's split by thread: JIT compilers, tasks, GC.
For the burst, also the CPU per change of capture and the three followers
together, and the rate the machine could reach with every core busy at that
cost (``bench.cpu.budget``), as a ratio to capture alone.

**Throughput.** Per phase: the rate written to Postgres, the rate that
reached Kafka (capture), and each follower's ``cdcsync_changes_applied_total``
rate. The burst phase gives the live throughput of the three followers
together (changes / time until the last update is visible in every store)
next to capture alone (the time until the last is in Kafka). Then, with the
daemon stopped, the raw ceilings of the same changes (``bench.raw``): each
sink's client library alone, and the three at once, which bounds what three
followers sharing the cores could ever reach.

Not a pass/fail test. Usage: python -m bench.freshness [--rates 1000,5000] [--seconds 180] [--warm-up 900]
[--settled 0.1] [--quiet 3] [--quiet-s 75] [--daemon-env KEY=VALUE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench import cpu, daemon_report, raw
from bench.common import (
    ENV,
    cleanup,
    free_port,
    one_table_doc,
    say,
    start_daemon,
    stop_daemon,
    stop_on_sigterm,
    three_followers,
)
from bench.freshness_report import print_results
from bench.markers import TARGET, Marks, Poller

WARM_UP_MIN_S = 120  # the shortest warm-up: the JIT's first minutes always compile (docs/performance.md)
DRAIN_S = 600  # after a phase, until its last marker is in every store (a warehouse at 5k/s ended 105 s behind)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,5000", help="steady phases, changes/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=180, help="length of each steady phase")
    parser.add_argument(
        "--warm-up",
        type=float,
        default=900,
        help="at most this many seconds at the first rate before the phases, reported apart (see --settled)",
    )
    parser.add_argument(
        "--settled",
        type=float,
        default=0.1,
        help="the warm-up ends after a minute in which the JVM's JIT compilers used fewer cores (0: never early)",
    )
    parser.add_argument(
        "--quiet", type=int, default=3, help="markers each committed after --quiet-s s without a change (0: none)"
    )
    parser.add_argument("--quiet-s", type=float, default=75, help="the quiet spell before each of those markers")
    parser.add_argument("--burst", type=int, default=100_000, help="updates of the flat-out phase (0: none)")
    parser.add_argument("--rows", type=int, default=50_000, help="rows of the table the writer rewrites in turn")
    parser.add_argument(
        "--follower",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a follower setting (YAML value) for all three, or for one as NAME.KEY=VALUE: trigger_interval_s=1, "
        "warehouse.trigger_interval_s=5 (followers: search, cache, warehouse)",
    )
    parser.add_argument(
        "--debezium", action="append", default=[], metavar="KEY=VALUE", help="a Debezium property of the source"
    )
    parser.add_argument(
        "--daemon-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable of `cdcsync run` (it starts with no CDCSYNC_SPARK_* of the bench's own), "
        "e.g. CDCSYNC_SPARK_WORKER_DAEMON=pyspark.daemon",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    stop_on_sigterm()

    from cdcsync.config.file import load_config
    from cdcsync.connectors.apply import apply
    from cdcsync.sources.postgres.connection import connect as connect_postgres

    tag = f"fresh{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-fresh-"))
    followers = three_followers(tag, tmp)
    settings = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.follower)}
    for f in followers:
        f["mappings"] = {f"public.{table}": {"target": TARGET}}
        for key, value in settings.items():
            name, _, own = key.rpartition(".")
            if name in ("", f["name"]):
                f[own] = value
    debezium = _pairs(args.debezium)
    doc = one_table_doc(tag, table, followers, tmp, heartbeat_interval_ms=1000, debezium=debezium)
    config_path = tmp / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    config = load_config(config_path)
    topic = config.sources[0].topic(config.sources[0].tables[0])
    pg = connect_postgres(config.sources[0], autocommit=True)
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL, body text NOT NULL)")
    pg.execute(
        f"INSERT INTO {table} SELECT g, CASE WHEN g = 0 THEN 'mark:0' ELSE 'row ' || g END, 0, "
        f"repeat(md5(g::text), 16) FROM generate_series(0, {args.rows}) g"
    )
    port = free_port()
    daemon_env = _pairs(args.daemon_env)
    results: dict[str, Any] = {
        "rows": args.rows,
        "follower": settings,
        "debezium": debezium,
        "daemon_env": daemon_env,
        "phases": [],
    }
    daemon, log = None, tmp / "run.log"
    marks = Marks(pg, table)
    pollers = [Poller(f, tag, marks) for f in ("search", "cache", "warehouse")]
    try:
        apply(config)
        daemon = start_daemon(
            config_path, log, "--metrics-port", str(port), env={"CDCSYNC_SPARK_PROGRESS_LOG_LEVEL": "INFO"} | daemon_env
        )
        for p in pollers:
            p.start(tmp)
        say(f"`cdcsync run` started (log {log}); waiting for the {args.rows:,} rows in every store ...")
        started = time.monotonic()
        while not all(p.seen >= 0 for p in pollers):
            if daemon.poll() is not None:
                raise SystemExit(f"`cdcsync run` exited ({daemon.returncode}): {log.read_text()[-2000:]}")
            if time.monotonic() - started > 900:
                raise SystemExit("the stores did not show the first marker within 900 s")
            time.sleep(0.5)
        say(f"  caught up after {time.monotonic() - started:.0f}s; settling 20 s")
        time.sleep(20)
        rates = [int(r) for r in args.rates.split(",") if r]
        plan = [("warm-up", rates[0], args.warm_up)] if rates and args.warm_up > 0 else []
        for label, rate, seconds in plan + [("steady", rate, args.seconds) for rate in rates]:
            since, cpu_before = time.time(), cpu.sample()
            settled = None
            if label == "warm-up" and args.settled > 0:
                settled = cpu.JitSettled(args.settled, least_s=WARM_UP_MIN_S)
            phase = _steady(pg, table, rate, seconds, args.rows, marks, pollers, port=port, topic=topic, until=settled)
            phase["label"] = label
            if settled is not None:
                phase["jit_last_minute"] = settled.last
                say(f"  warm-up {phase['seconds']:.0f}s; the JIT's last minute: {settled.last} cores")
            phase["cpu_cores"] = cpu.cores(cpu_before, cpu.sample())
            phase["batches"] = daemon_report.batch_phases(log, since, time.time())
            for name, figures in phase["batches"].items():
                say(f"  [{name}] batches {figures}")
            say(f"  cpu (cores): {cpu.summary(phase['cpu_cores'])}")
            results["phases"].append(phase)
        if args.quiet:
            results["quiet"] = _quiet(marks, pollers, args.quiet, args.quiet_s)
        if args.burst:
            cpu_before = cpu.sample()
            burst = results["burst"] = _burst(pg, table, args.burst, args.rows, marks, pollers, topic, config)
            burst["cpu_cores"] = cpu.cores(cpu_before, cpu.sample())
            # Capture and the three followers together: what the burst's changes cost the machine.
            burst["cpu"] = cpu.budget(burst["cpu_cores"], burst["seconds"], burst["changes"])
            burst["bound_ratio_to_capture"] = round(burst["cpu"]["bound_per_s"] / burst["capture_per_s"], 2)
            stop_daemon(daemon)  # the raw writers get the cores the daemon had
            start, end = results["burst"].pop("window")
            results["burst"]["raw"] = raw.ceilings(config_path, ["search", "cache", "warehouse"], topic, start, end)
            results["burst"]["ratio_to_raw_at_once"] = round(
                results["burst"]["all_three_per_s"] / results["burst"]["raw"]["three_at_once_per_s"], 2
            )
    finally:
        for p in pollers:
            p.stop()
        stop_daemon(daemon)
        cleanup(config, tag, table, pg)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(results)
    return 0


def _steady(
    pg: Any,
    table: str,
    rate: int,
    seconds: float,
    rows: int,
    marks: Marks,
    pollers: list[Poller],
    *,
    port: int,
    topic: str,
    until: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Commit ``rate`` updates a second for ``seconds`` (or until ``until()``, asked each second), in ten
    statements a second, and a marker each second."""
    say(f"{rate:,} changes/s for {seconds:.0f}s" + (" at most" if until is not None else "") + " ...")
    before, kafka_before = daemon_report.scrape(port), _topic_end(topic)
    first_mark, written, low = max(marks.at) + 1, 0, 1
    per_tick = max(1, rate // 10)
    started = time.monotonic()
    tick = 0
    while time.monotonic() - started < seconds:
        if tick % 10 == 0:
            if until is not None and until():
                break
            marks.commit()
        high = low + per_tick - 1
        pg.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id BETWEEN {low} AND {min(high, rows)}")
        written += min(high, rows) - low + 1
        low = high + 1 if high < rows else 1
        tick += 1
        time.sleep(max(0.0, started + tick * 0.1 - time.monotonic()))
    elapsed, kafka_at_end = time.monotonic() - started, _topic_end(topic)
    last_mark = max(marks.at)
    _wait_seen(pollers, last_mark, DRAIN_S)
    after = daemon_report.scrape(port)
    phase: dict[str, Any] = {
        "rate": rate,
        "seconds": round(elapsed),
        "written_per_s": round(written / elapsed),
        # what capture had put in Kafka by the time the writer stopped: below written_per_s when it lags
        "in_kafka_per_s": round((kafka_at_end - kafka_before) / elapsed),
        "markers": last_mark - first_mark + 1,
    }
    for p in pollers:
        delays = sorted(d for n, d in p.delays.items() if first_mark <= n <= last_mark)
        hist = daemon_report.histogram_delta(before, after, p.name)
        phase[p.name] = {
            "seen": {q: _quantile_sorted(delays, q) for q in ("p50", "p95", "p99")} | {"max": round(max(delays), 2)},
            "histogram": {q: daemon_report.bucket_quantile(hist, q) for q in ("p50", "p95", "p99")}
            | {"within_1s": daemon_report.within(hist, 1.0), "within_2s": daemon_report.within(hist, 2.0)},
            "applied_per_s": round(daemon_report.counter_delta(before, after, p.name) / (time.monotonic() - started)),
        }
        say(f"  [{p.name}] seen p50/p95/p99 {phase[p.name]['seen']}  histogram {phase[p.name]['histogram']}")
    return phase


def _quiet(marks: Marks, pollers: list[Poller], markers: int, quiet_s: float) -> dict[str, Any]:
    """``markers`` markers, each committed after ``quiet_s`` seconds without a change: commit -> seen per store."""
    say(f"{markers} markers, each after {quiet_s:.0f}s without a change ...")
    first = mark = max(marks.at) + 1
    for _ in range(markers):
        time.sleep(quiet_s)
        mark = marks.commit()
        _wait_seen(pollers, mark, DRAIN_S)
    out: dict[str, Any] = {"markers": markers, "quiet_s": quiet_s}
    for p in pollers:
        out[p.name] = [round(p.delays[n], 2) for n in range(first, mark + 1)]
        say(f"  [{p.name}] seen after {out[p.name]} s")
    return out


def _burst(
    pg: Any, table: str, changes: int, rows: int, marks: Marks, pollers: list[Poller], topic: str, config: Any
) -> dict[str, Any]:
    """``changes`` updates as fast as Postgres takes them, then a marker: changes/s until visible, and in Kafka."""
    say(f"burst: {changes:,} updates flat out ...")
    start = _topic_end(topic)
    target_end = start + changes + 1
    started, low, done = time.monotonic(), 1, 0
    while done < changes:
        n = min(1000, changes - done, rows - low + 1)
        pg.execute(f"UPDATE {table} SET qty = qty + 1 WHERE id BETWEEN {low} AND {low + n - 1}")
        done, low = done + n, (low + n - 1) % rows + 1
    written_s = time.monotonic() - started
    mark = marks.commit()  # after every update: seen means every update before it is applied
    in_kafka = None
    deadline = started + 1800
    visible: dict[str, float] = {}
    while len(visible) < len(pollers) and time.monotonic() < deadline:
        if in_kafka is None and _topic_end(topic) >= target_end:
            in_kafka = time.monotonic() - started
        for p in pollers:
            if p.name not in visible and p.seen >= mark:
                visible[p.name] = time.monotonic() - started
        time.sleep(0.2)
    if len(visible) < len(pollers):
        raise SystemExit(f"burst: not visible in {sorted({p.name for p in pollers} - set(visible))} within 1800 s")
    in_kafka = in_kafka or max(visible.values())
    out: dict[str, Any] = {
        "changes": changes,
        "written_per_s": round(changes / written_s),
        "capture_per_s": round(changes / in_kafka),
        "all_three_per_s": round(changes / max(visible.values())),
        "seconds": round(max(visible.values()), 1),
    }
    out |= {f"{name}_per_s": round(changes / s) for name, s in visible.items()}
    out["ratio_to_capture"] = round(out["all_three_per_s"] / out["capture_per_s"], 2)
    say(f"  {out}")
    return out | {"window": (start, start + changes)}


def _wait_seen(pollers: list[Poller], mark: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(p.seen < mark for p in pollers):
        if time.monotonic() > deadline:
            late = [p.name for p in pollers if p.seen < mark]
            raise SystemExit(f"marker {mark} not visible in {late} within {timeout_s:.0f}s of the phase's end")
        time.sleep(0.2)


def _topic_end(topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}", "group.id": "bench-freshness"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def _quantile_sorted(values: list[float], q: str) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(len(values) * int(q[1:]) / 100))], 2)


def _pairs(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict (the value may hold ``=``)."""
    return dict(item.partition("=")[::2] for item in items)


if __name__ == "__main__":
    sys.exit(main())
