"""A source restored from a backup: its log is behind what capture already read.

A version is built from the source's own log position (a Postgres LSN, a
MariaDB GTID sequence; cdcsync.events). When a database is restored from a
backup, or its binlog reset, its log goes back: every change made after the
restore gets a version below what the followers already hold, and the apply
rule skips it as older. Silently, unless it is noticed here.

The evidence is Kafka Connect's committed offset for the connector (what
capture has read) against the database's current position: a committed
Postgres LSN beyond ``pg_current_wal_lsn()``, or a committed MariaDB GTID
sequence beyond ``@@gtid_binlog_pos`` in domain 0, can only mean the log went
back. The capture watchdog checks it every minute and ``connectors apply``
before it updates a connector; both name the repair (docs/capture.md, "After
a restore").
"""

from __future__ import annotations

from typing import Any

from cdcsync.config import SourceConfig
from cdcsync.connectors.client import ConnectClient

REPAIR = (
    "changes from here on would rank below what the followers hold and be skipped as older. "
    "Repair (docs/capture.md, 'After a restore'): delete the connector, its offsets and its topics, "
    "run `cdcsync connectors apply` for a fresh snapshot, then rebuild every follower"
)


def _gtid_seq(gtids: str, domain: str = "0") -> int | None:
    for gtid in gtids.split(","):
        parts = gtid.strip().split("-")
        if len(parts) == 3 and parts[0] == domain and parts[2].isdigit():
            return int(parts[2])
    return None


def went_back(kind: str, committed: dict[str, Any], current: Any) -> str | None:
    """What shows the log went back behind ``committed`` (a connector's offset), or None (pure)."""
    if kind == "postgres":
        lsn = committed.get("lsn")
        if isinstance(lsn, int) and current is not None and int(current) < lsn:
            return f"its WAL position {int(current)} is behind the LSN {lsn} capture already read"
        return None
    gtids = committed.get("gtids")
    seq = _gtid_seq(gtids) if isinstance(gtids, str) else None
    now = _gtid_seq(str(current or ""))
    if seq is not None and (now is None or now < seq):
        return f"its GTID position {current or 'empty'} is behind {gtids}, which capture already read"
    return None


def current_position(source: SourceConfig) -> Any:
    """The database's log position now: an LSN as a number (Postgres), ``@@gtid_binlog_pos`` (MariaDB)."""
    if source.kind == "postgres":
        from cdcsync.db import connect_postgres

        with connect_postgres(source, timeout_s=5, autocommit=True) as conn:
            row = conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
            return row[0] if row else None
    from cdcsync.db import connect_mariadb

    conn = connect_mariadb(source, timeout_s=5, database=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            row = cur.fetchone()
            return row[0] if row else None
    finally:
        conn.close()


def check(client: ConnectClient, source: SourceConfig) -> str | None:
    """The problem, naming the source and the repair, if its database went back behind capture; else None."""
    offsets = client.offsets(source.name)
    committed = [o.get("offset") or {} for o in offsets]
    if not committed:
        return None
    current = current_position(source)
    for offset in committed:
        found = went_back(source.kind, offset, current)
        if found:
            why = "restored from a backup, or its log reset"
            return f"source {source.name} went back in time: {found}: {why}; {REPAIR}"
    return None
