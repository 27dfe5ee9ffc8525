"""A connector created anew never resumes from offsets a deleted connector left behind.

Kafka Connect keeps a connector's source offsets after the connector is
deleted, keyed by its name. A Postgres connector re-created under the same
name with a new replication slot (the old one dropped or lost) would resume
from the old offsets: no snapshot, and the new slot starts at the present, so
every change between the old offset and the slot's creation is lost without
a word. When ``connectors apply`` creates a Postgres connector whose slot does
not exist, it therefore creates it STOPPED, deletes any offsets left under its
name, and resumes it: Debezium takes a fresh snapshot, whose rows outrank
what the followers hold from before (cdcsync.events).

MariaDB needs nothing: its offsets are a GTID position, and resuming from one
replays the binlog since (a purged binlog fails loudly in Debezium itself).
"""

from __future__ import annotations

from cdcsync.config import SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.sources import kind_of


def create(client: ConnectClient, source: SourceConfig, desired: dict[str, str]) -> str:
    """Register a connector that does not exist yet; the action taken, for ``apply``'s report."""
    if kind_of(source).capture.resumes_stale_offsets(source):
        client.put_config(source.name, desired)
        return "created"
    client.create_stopped(source.name, desired)
    stale = client.offsets(source.name)
    if stale:
        client.delete_offsets(source.name)
    client.resume(source.name)
    return (
        "created (offsets left by a deleted connector reset: a new slot starts with a snapshot)" if stale else "created"
    )
