"""``python -m bench.replica_identity``: what ``REPLICA IDENTITY FULL`` costs the source, against DEFAULT.

``connectors apply`` sets FULL on every captured table with a column Postgres
may store out of line (docs/capture.md), so that an UPDATE leaving a large
value alone does not reach the followers as Debezium's placeholder. The price
is WAL: each UPDATE and DELETE logs the old row whole, large values included.
This measures it in one run, on the same rows under both identities: WAL
bytes and seconds for an UPDATE of one small column of every row, for narrow
rows and for rows with a wide (TOASTed, incompressible) text. Postgres of
the local stack only; no capture runs. Not a pass/fail test.

Usage: python -m bench.replica_identity [--rows N] [--wide-kb K] [--batch B] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import ENV, one_table_config, say, stack


def _connect(admin: bool = False) -> psycopg.Connection:
    """The stack's capture user, as the other benches connect; ``admin``: the superuser over the socket (CHECKPOINT)."""
    if admin:
        return psycopg.connect(
            host=str(stack.RUN), port=int(ENV["PG_PORT"]), dbname=ENV["PG_DATABASE"], user="postgres", autocommit=True
        )
    from cdcsync.sources.postgres.connection import connect as connect_postgres

    source = one_table_config("bench_identity", "unused", [], Path(tempfile.gettempdir())).sources[0]
    return connect_postgres(source, autocommit=True)


def measure(conn: psycopg.Connection, table: str, identity: str, rows: int, batch: int) -> dict[str, Any]:
    """WAL bytes and seconds for ``UPDATE ... SET n = n + 1`` of every row, ``batch`` rows a transaction."""
    conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY {identity}")  # type: ignore[call-overload]
    with _connect(admin=True) as admin:  # full-page images after a checkpoint would charge one run alone
        admin.execute("CHECKPOINT")
    start_lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    started = time.monotonic()
    for low in range(0, rows, batch):
        conn.execute(
            f"UPDATE {table} SET n = n + 1 WHERE id >= %s AND id < %s",  # type: ignore[call-overload]
            (low, low + batch),
        )
    seconds = time.monotonic() - started
    wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start_lsn,)).fetchone()[0]  # type: ignore[index]
    return {"identity": identity, "wal_bytes": int(wal), "wal_bytes_per_update": int(wal) / rows, "seconds": seconds}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with _connect() as conn:
        for shape, wide in (("narrow", 0), ("wide", args.wide_kb)):
            table = f"bench_identity_{shape}"
            conn.execute(f"DROP TABLE IF EXISTS {table}")  # type: ignore[call-overload]
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int NOT NULL, label text, body text)")  # type: ignore[call-overload]
            # Random hex, 32 characters per md5, made per row (g is referenced): stored out of line.
            body = f"(SELECT string_agg(md5(random()::text || g || s), '') FROM generate_series(1, {wide * 32}) s)"
            body = body if wide else "NULL"
            say(f"{shape}: loading {args.rows:,} rows" + (f" with {wide} KB of text each" if wide else ""))
            conn.execute(
                f"INSERT INTO {table} SELECT g, 0, 'label ' || g, {body} FROM generate_series(0, %s - 1) g",  # type: ignore[call-overload]
                (args.rows,),
            )
            conn.execute(f"VACUUM ANALYZE {table}")  # type: ignore[call-overload]
            try:
                for identity in ("DEFAULT", "FULL", "DEFAULT", "FULL"):  # twice each, interleaved
                    figures = measure(conn, table, identity, args.rows, args.batch)
                    say(
                        f"{shape} {identity:7}: {figures['wal_bytes'] / 2**20:8.1f} MiB of WAL, "
                        f"{figures['wal_bytes_per_update']:8.0f} B per update, {figures['seconds']:6.2f} s"
                    )
                    results.append({"shape": shape, "wide_kb": wide, "rows": args.rows, **figures})
            finally:
                conn.execute(f"DROP TABLE IF EXISTS {table}")  # type: ignore[call-overload]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--wide-kb", type=int, default=8, help="KB of incompressible text in each wide row")
    parser.add_argument("--batch", type=int, default=1000, help="rows updated per transaction")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"\n{'shape':7} {'identity':8} {'WAL MiB':>9} {'B/update':>9} {'seconds':>8}  FULL/DEFAULT (WAL, s)")
    for shape in ("narrow", "wide"):
        rows = [r for r in results if r["shape"] == shape]
        base = [r for r in rows if r["identity"] == "DEFAULT"]
        for r in rows:
            ratio = ""
            if r["identity"] == "FULL":
                d = base[rows.index(r) // 2]
                ratio = f"  {r['wal_bytes'] / d['wal_bytes']:.2f}x, {r['seconds'] / d['seconds']:.2f}x"
            print(
                f"{shape:7} {r['identity']:8} {r['wal_bytes'] / 2**20:9.1f} {r['wal_bytes_per_update']:9.0f} "
                f"{r['seconds']:8.2f}{ratio}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
