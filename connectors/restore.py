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
from cdcsync.sources import kind_of

REPAIR = (
    "changes from here on would rank below what the followers hold and be skipped as older. "
    "Repair (docs/capture.md, 'After a restore'): delete the connector, its offsets and its topics, "
    "run `cdcsync connectors apply` for a fresh snapshot, then rebuild every follower"
)


def went_back(kind: str, committed: dict[str, Any], current: Any) -> str | None:
    """What shows the log went back behind ``committed`` (a connector's offset), or None (pure)."""
    return kind_of(kind).capture.went_back(committed, current)


def current_position(source: SourceConfig) -> Any:
    """The database's log position now: an LSN as a number (Postgres), ``@@gtid_binlog_pos`` (MariaDB)."""
    return kind_of(source).capture.log_position(source)


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
