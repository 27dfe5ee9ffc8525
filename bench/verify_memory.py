"""``python -m bench.verify_memory``: ``cdcsync verify``'s peak memory and time as a table grows.

For each size in ``--rows`` (default 100k and 1M) and each store in
``--sinks`` (default Elasticsearch; ``warehouse``: Delta, filled as a
bootstrap fills a staged table, then published): a Postgres table of that many narrow
rows (a bigint key, a 96-character text, an int, a timestamptz; with
``--row-kb K`` a text of K KB of random hex besides, which Postgres stores
out of line) is made, the store is filled with the same rows through the
sink's own writes (no capture: what is measured is the comparison), and
``cdcsync verify`` runs in a process of its own. Its peak RSS (the sum over
the verify's processes, sampled every 0.2 s: a large table's source side
has a process of its own) and its seconds are printed, with the ratios to
the first size's in the same run: memory that stays put while the rows
grow is what ``sync.verify`` promises; the time should grow with the rows.
The warehouse is verified twice per table: as ``verify`` chooses (range
checksums, ``sync.verify.ranges``) and ``--by-row``, the baseline of the
same run (``--by-row-only``: only that).
Not a pass/fail test.
Usage: python -m bench.verify_memory [--rows 100000,1000000] [--sinks search,cache,warehouse] [--row-kb 0]
[--stale 0] [--by-row-only] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from bench.common import empty_stores, one_table_doc, say, three_followers

ROWS_PER_WRITE = 5_000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.verify_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="100000,1000000", help="table sizes, comma-separated")
    parser.add_argument(
        "--sinks", default="search", help="followers: search (Elasticsearch), cache (Redis), warehouse (Delta)"
    )
    parser.add_argument("--row-kb", type=int, default=0, help="KB of random text in each row besides (0: narrow)")
    parser.add_argument(
        "--by-row-only", action="store_true", help="the warehouse compared by row only, not also by range checksums"
    )
    parser.add_argument(
        "--stale", type=int, default=0, help="rows changed in the source only, spread over the table (0: none)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    results = []
    for sink in args.sinks.split(","):
        ways = ["ranges", "by row"] if sink == "warehouse" and not args.by_row_only else ["by row"]
        measured = [r for rows in sizes for r in measure(rows, sink, args.row_kb, ways, args.stale)]
        for way in ways:
            results += ratios([r for r in measured if r["way"] == way])
    for r in results:
        say(
            f"verify {r['sink']:<6} {r['way']:<6} {r['rows']:>10,} rows of {r['row_kb']} KB more, {r['stale']} stale: "
            f"{r['seconds']:7.1f} s "
            f"({r['rows_per_s']:,.0f} rows/s), "
            f"peak RSS {r['peak_rss_mib']:,.0f} MiB; against {r['first_rows']:,} rows: rows x{r['rows_ratio']}, "
            f"time x{r['seconds_ratio']}, memory x{r['rss_ratio']}; clean={r['clean']}, stale found {r['found_stale']}"
        )
    if args.json:
        print(json.dumps(results, indent=2))


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result against the first (the smallest table) of its store."""
    first = results[0]
    for result in results:
        result["rss_ratio"] = round(result["peak_rss_mib"] / first["peak_rss_mib"], 2)
        result["seconds_ratio"] = round(result["seconds"] / first["seconds"], 2)
        result["rows_ratio"] = round(result["rows"] / first["rows"], 2)
        result["first_rows"] = first["rows"]
    return results


def measure(
    rows: int, sink: str = "search", row_kb: int = 0, ways: list[str] | None = None, stale: int = 0
) -> list[dict[str, Any]]:
    """One table of ``rows`` rows, verified each of ``ways`` (``ranges``: as ``verify`` chooses; ``by row``:
    ``verify --by-row``); ``stale``: that many rows, scattered over the table, changed in the source only first."""
    with narrow_table(rows, sink, row_kb) as (config_path, config):
        if stale:
            from cdcsync.sources.postgres.connection import connect as connect_postgres

            with connect_postgres(config.sources[0], autocommit=True) as pg:
                step = max(1, rows // stale)
                pg.execute(
                    f"UPDATE {config.sources[0].tables[0].table} SET n = n + 1"
                    f" WHERE id IN (SELECT 1 + k * {step} FROM generate_series(0, {stale - 1}) k)"
                )
        return [_verified(config_path, rows, sink, row_kb, way, stale) for way in ways or ["by row"]]


def _verified(config_path: Path, rows: int, sink: str, row_kb: int, way: str, stale: int = 0) -> dict[str, Any]:
    say(f"{rows:,} rows: cdcsync verify ({way}) ...")
    started = time.monotonic()
    verify = subprocess.Popen(
        [sys.executable, "-m", "cdcsync", "--config", str(config_path), "verify", "--json"]
        + (["--by-row"] if way == "by row" else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    peak = [0]
    sampler = threading.Thread(target=_sample_rss, args=(verify, peak), daemon=True)
    sampler.start()
    out = verify.stdout.read() if verify.stdout else b""
    code = verify.wait()  # Popen.wait, as the sampler polls: os.wait4 here raced its poll for the exit status
    seconds = time.monotonic() - started
    sampler.join()
    report = json.loads(out)
    return {
        "sink": sink,
        "way": way,
        "rows": rows,
        "row_kb": row_kb,
        "stale": stale,
        "seconds": round(seconds, 1),
        "rows_per_s": round(rows / seconds),
        # Sampled, not ru_maxrss: Linux keeps in it the RSS of the forked copy of this process that exec'd it.
        "peak_rss_mib": round(peak[0] / 2**20),
        "clean": code == 0 and all(r["clean"] for r in report),
        "found_stale": sum(r["stale_count"] for r in report),
    }


def _sample_rss(process: subprocess.Popen[bytes], peak: list[int]) -> None:
    """The largest sum of the RSS of ``process`` and its children seen, every 0.2 s until it ends."""
    page = os.sysconf("SC_PAGE_SIZE")
    while process.poll() is None:
        total = 0
        for pid in [process.pid, *_children(process.pid)]:
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
        peak[0] = max(peak[0], total)
        time.sleep(0.2)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@contextmanager
def narrow_table(rows: int, sink: str, row_kb: int = 0) -> Iterator[tuple[Path, Any]]:
    """A Postgres table of ``rows`` narrow rows (``row_kb``: with a text of that many KB of random hex), captured by
    nothing, and ``sink``'s store filled with the same rows: the config's path and the config; the table and the
    store are removed after."""
    from cdcsync.config.file import load_config
    from cdcsync.sources.postgres.connection import connect as connect_postgres

    tag = f"vm{uuid.uuid4().hex[:6]}"
    table = f"bench_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="cdcsync-bench-verify-"))
    config_path = tmp / "cdcsync.yaml"
    config_path.write_text(yaml.safe_dump(one_table_doc(tag, table, three_followers(tag, tmp, [sink]), tmp)))
    config = load_config(config_path)
    pg = connect_postgres(config.sources[0], autocommit=True)
    try:
        say(f"{sink}: {rows:,} rows, the table ...")
        pg.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL, n int NOT NULL, at timestamptz)")
        pg.execute(
            f"INSERT INTO {table} SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text), g % 1000,"
            f" timestamptz '2026-01-01' + g * interval '1 second' FROM generate_series(1, {rows}) g"
        )
        if row_kb:
            pg.execute(f"ALTER TABLE {table} ADD COLUMN body text")
            # 32 random md5s a KB, a row's own: hex that pglz cannot shrink, so each value is stored out of line
            pg.execute(
                f"UPDATE {table} SET body = (SELECT string_agg(md5(random()::text || id::text || k::text), '')"
                f" FROM generate_series(1, {32 * row_kb}) k)"
            )
        say(f"{sink}: {rows:,} rows, the store ...")
        fill(config, rows)
        yield config_path, config
    finally:
        pg.execute(f"DROP TABLE IF EXISTS {table}")
        empty_stores(tag)
        shutil.rmtree(tmp, ignore_errors=True)  # the warehouse's tables, the config


def fill(config: Any, rows: int) -> None:
    """The store holds the table's rows as a follower would write them (version 1, ``op=r``)."""
    from cdcsync.events import Change
    from cdcsync.sync.catalog import mappings_for, source_rows
    from cdcsync.sync.mapping import Row, canonical_doc, doc_id
    from cdcsync.sync.sinks import build_sink, needs_spark

    cfg = config.followers[0]
    source, ref = config.sources[0], config.sources[0].tables[0]
    mapping = next(iter(mappings_for(config, cfg).values()))
    spark = None
    if needs_spark(cfg):  # the warehouse: filled as a bootstrap fills it, a staged table loaded then published
        from cdcsync.spark import spark_session

        spark = spark_session("cdcsync-bench-verify", config=config)
    sink = build_sink(config, cfg, spark)
    sink.open([mapping])
    if spark is not None:
        sink.stage([mapping])
    batch: list[Row] = []
    written = 0
    for row in source_rows(source, ref):
        doc, ident = canonical_doc(row, mapping), doc_id(row, mapping)
        change = Change(source.name, mapping.table, "r", {"id": row["id"]}, doc, None, 1, "bench", 0, 0)
        batch.append(Row(change, mapping.target, ident, doc))
        if len(batch) == ROWS_PER_WRITE:
            written += sink.write(0, batch).applied
            batch = []
    if batch:
        written += sink.write(0, batch).applied
    if spark is not None:
        sink.publish()
    sink.make_visible([mapping.target])
    sink.close()
    if spark is not None:
        spark.stop()
    if written != rows:
        raise SystemExit(f"the store took {written:,} of {rows:,} rows")


if __name__ == "__main__":
    main()
