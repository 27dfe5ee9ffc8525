"""``python -m bench.memory``: ``cdcsync run`` catching up a backlog of wide rows; its peak RSS, default settings.

The backlog: ``--rows`` rows of ``--row-kb`` KB (random-looking text, so that
no compression shrinks it), each rewritten whole until the log holds
``--changes`` changes, then a tenth of the rows deleted. Only then does
``cdcsync run`` start, with no memory setting of its own (the defaults of
docs/daemon.md, "Memory"), for all three followers, and run until ``cdcsync
verify`` is clean in every store. Its process tree (the daemon's Python, the
driver JVM, Spark's Python workers) is sampled every half second.

Prints the changes and bytes of the backlog, the seconds to a clean verify,
the peak RSS with its parts, and whether the log shows an OutOfMemoryError.
Not a pass/fail test (tests/chaos/test_wide_backlog.py is the test).
Usage: python -m bench.memory [--changes N] [--rows N] [--row-kb N] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from bench.common import (
    PeakRss,
    cleanup,
    one_table_doc,
    say,
    start_daemon,
    stop_daemon,
    stop_on_sigterm,
    three_followers,
)

MIB = 1 << 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000, help="changes in the backlog (inserts and rewrites)")
    parser.add_argument(
        "--rows", type=int, default=10_000, help="rows of the table; each is rewritten changes/rows-1 times"
    )
    parser.add_argument("--row-kb", type=int, default=60, help="size of each row's text")
    parser.add_argument("--timeout-s", type=float, default=5400, help="give up on the catch-up after this long")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    stop_on_sigterm()

    from cdcsync.config.file import load_config
    from cdcsync.connectors.apply import apply
    from cdcsync.snapshot.replay import capture
    from cdcsync.sources.postgres.connection import connect as connect_postgres

    tag = f"mem{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-memory-"))
    config_path = tmp / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(one_table_doc(tag, table, three_followers(tag, tmp), tmp)))
    config = load_config(config_path)
    source = config.sources[0]
    topic = source.topic(source.tables[0])
    pg = connect_postgres(source, autocommit=True)
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body text NOT NULL)")
    results: dict[str, object] = {"changes": args.changes, "rows": args.rows, "row_kb": args.row_kb}
    log = tmp / "run.log"
    daemon = None
    try:
        apply(config)
        rounds = max(1, args.changes // args.rows)
        pieces = args.row_kb * 1024 // 32
        say(f"backlog: {args.rows:,} rows of {args.row_kb} KB, written {rounds} times, then a tenth deleted ...")
        for n in range(rounds):
            for low in range(1, args.rows + 1, 200):
                high = min(low + 199, args.rows)
                body = (
                    f"(SELECT string_agg(md5(g::text || ':{n}:' || i::text), '') FROM generate_series(1, {pieces}) i)"
                )
                if n == 0:
                    pg.execute(f"INSERT INTO {table} SELECT g, {body} FROM generate_series({low}, {high}) g")
                else:
                    pg.execute(f"UPDATE {table} t SET body = {body.replace('g::text', 't.id::text')} "
                               f"WHERE id BETWEEN {low} AND {high}")  # fmt: skip
            say(f"  round {n + 1}/{rounds} written")
        pg.execute(f"DELETE FROM {table} WHERE id % 10 = 0")
        expected = rounds * args.rows + 2 * (args.rows // 10)  # the deletes, and their tombstones
        started = time.monotonic()
        while sum(high for _low, high in capture(config, [topic]).values()) < expected:
            if time.monotonic() - started > args.timeout_s:
                raise SystemExit(f"capture did not put {expected:,} records in {topic} within {args.timeout_s:.0f}s")
            time.sleep(2)
        results["log_mib"] = round(rounds * args.rows * args.row_kb / 1024)  # the rows' text; envelopes add little
        say(f"backlog in Kafka: {expected:,} records, ~{results['log_mib']:,} MiB; starting `cdcsync run` ...")

        command = [sys.executable, "-m", "cdcsync", "--config", str(config_path)]
        daemon = start_daemon(config_path, log, "--metrics-port", "0")
        rss, started, next_verify, clean = PeakRss(daemon.pid), time.monotonic(), time.monotonic() + 30, False
        while not clean:
            rss.sample()
            if daemon.poll() is not None:
                raise SystemExit(f"`cdcsync run` exited ({daemon.returncode}): {log.read_text()[-2000:]}")
            if time.monotonic() > next_verify:
                verify = subprocess.run([*command, "verify"], capture_output=True, text=True, timeout=1800)
                clean = verify.returncode == 0
                next_verify = time.monotonic() + 20
                say(f"  {time.monotonic() - started:,.0f}s: peak RSS {rss.peak / MIB:,.0f} MiB; "
                    f"verify {'clean' if clean else 'not yet'}")  # fmt: skip
            if time.monotonic() - started > args.timeout_s:
                raise SystemExit(f"not converged within {args.timeout_s:.0f}s; peak RSS {rss.peak / MIB:,.0f} MiB")
            time.sleep(0.5)
        results["seconds_to_clean"] = round(time.monotonic() - started)
        results["peak_rss_mib"] = round(rss.peak / MIB)
        results["peak_rss_parts_mib"] = {k: round(v / MIB) for k, v in sorted(rss.parts.items())}
        results["out_of_memory"] = "OutOfMemoryError" in log.read_text(errors="replace")
    finally:
        stop_daemon(daemon)
        cleanup(config, tag, table, pg)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        parts = ", ".join(f"{k} {v:,}" for k, v in results["peak_rss_parts_mib"].items())  # type: ignore[attr-defined]
        print(
            f"\n`cdcsync run` catching up {args.changes:,} changes of {args.row_kb} KB"
            f" ({results['log_mib']:,} MiB of log), three followers, default settings:\n"
            f"  clean after {results['seconds_to_clean']:,} s; peak RSS {results['peak_rss_mib']:,} MiB ({parts} MiB);"
            f" OutOfMemoryError in the log: {'yes' if results['out_of_memory'] else 'no'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
