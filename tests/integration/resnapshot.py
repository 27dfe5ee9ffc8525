"""Capture lost and re-created: what an operator does after a connector was deleted or its slot lost.

``lose_capture`` removes a source's connector: on Postgres as an operator
would (delete it, its slot dropped or lost; Kafka Connect keeps its offsets,
and ``connectors apply`` must not resume from them), on MariaDB with its
offsets reset too, so that it snapshots again. Topics are kept: the followers
go on reading them where they stopped.
"""

from __future__ import annotations

import time

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.apply import client_for
from tests.support import pg_connect


def lose_capture(config: Config, source: SourceConfig) -> None:
    client = client_for(config)
    name = source.name
    if source.kind != "postgres":
        # MariaDB would resume from its old GTID position and replay the binlog: reset its offsets so that it
        # snapshots. A Postgres connector keeps them, as an operator's delete does: `connectors apply` must
        # see that its slot is new and reset them itself (connectors.offsets).
        client._call("PUT", f"/connectors/{name}/stop")
        deadline = time.monotonic() + 60
        while (client.status(name) or {}).get("connector", {}).get("state") != "STOPPED":
            if time.monotonic() > deadline:
                raise AssertionError(f"connector {name} did not stop: {client.status(name)}")
            time.sleep(0.5)
        client._call("DELETE", f"/connectors/{name}/offsets")
    client.delete(name)
    if source.kind == "postgres":
        with pg_connect() as conn:
            for _ in range(120):  # the slot stays active until the task has stopped
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)
                ).fetchone()
                if row is None:
                    break
                if not row[0]:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (source.slot,))
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"slot {source.slot} still active")
