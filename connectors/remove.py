"""``cdcsync connectors delete``: a source's capture removed for good, with what it leaves in the database.

Deleting a connector in Kafka Connect alone leaves its Postgres replication
slot, which keeps every WAL segment from then on until the database's disk
fills. So, in order:

1. the connector is deleted, and its tasks waited for: a slot stays active
   for as long as the old task's connection lives;
2. Postgres: the slot is dropped once inactive, then the publication;
3. the signal table cdcsync made (both databases);
4. with ``topics``, the source's topics (tables, heartbeat, signals,
   transactions, schema history) and the connector's secrets file.

Refused while a follower in the config still reads the source: its stream
would stop at the last change captured and look caught up. ``force`` deletes
anyway. Each step that finds nothing to do says so; running it twice is safe.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.apply import client_for
from cdcsync.connectors.client import ConnectClient
from cdcsync.connectors.render import secrets_file
from cdcsync.connectors.topics import admin, delete_topics, existing_topics, topic_specs
from cdcsync.errors import ConfigError, FatalError

SLOT_WAIT_S = 60.0  # for the old task's connection to let go of the slot


@dataclass
class Removed:
    source: str
    done: list[str] = field(default_factory=list)  # one line per step, what it did or found

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def readers(config: Config, source: SourceConfig) -> list[str]:
    """The followers of the config that read a table of ``source``."""
    return [f.name for f in config.followers if any(s.name == source.name for s, _ in config.followed_tables(f))]


def delete(
    config: Config, name: str, topics: bool = False, force: bool = False, client: ConnectClient | None = None
) -> Removed:
    """Remove source ``name``'s capture (module docstring); ``ConfigError`` for an unknown source or one still read."""
    source = next((s for s in config.sources if s.name == name), None)
    if source is None:
        known = ", ".join(s.name for s in config.sources) or "none"
        raise ConfigError([f"connectors delete {name}: no such source in the config (sources: {known})"])
    followed_by = [] if force else readers(config, source)
    if followed_by:
        raise ConfigError([
            f"connectors delete {name}: followers {', '.join(followed_by)} still read it; remove its tables from "
            "them (or the source from the config) first, or pass --force"
        ])  # fmt: skip
    client = client or client_for(config)
    removed = Removed(name)
    if client.status(name) is None:
        removed.done.append(f"connector {name}: not registered")
    else:
        client.delete(name)
        _gone(client, name)
        removed.done.append(f"connector {name}: deleted")
    if source.kind == "postgres":
        removed.done += _postgres(source)
    else:
        removed.done += _mariadb(source)
    if topics:
        names = [spec.name for spec in topic_specs(source)]
        present = sorted(set(names) & existing_topics(admin(config)))
        delete_topics(config, present)
        removed.done.append(f"topics: deleted {', '.join(present)}" if present else "topics: none left")
        secrets = secrets_file(source, config)
        if secrets.exists():
            secrets.unlink()
            removed.done.append(f"secrets file {secrets}: removed")
    return removed


def _gone(client: ConnectClient, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.status(name) is not None:
        if time.monotonic() > deadline:
            raise FatalError(f"connector {name}: still listed by Kafka Connect {timeout_s:.0f}s after its deletion")
        time.sleep(0.5)


def _postgres(source: SourceConfig) -> list[str]:
    from psycopg import sql

    from cdcsync.db import connect_postgres

    done = []
    with connect_postgres(source, autocommit=True) as pg:
        deadline = time.monotonic() + SLOT_WAIT_S
        while True:
            row = pg.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)
            ).fetchone()
            if row is None:
                done.append(f"replication slot {source.slot}: none")
                break
            if row[0] is None:
                pg.execute("SELECT pg_drop_replication_slot(%s)", (source.slot,))
                done.append(f"replication slot {source.slot}: dropped")
                break
            if time.monotonic() > deadline:
                raise FatalError(
                    f"replication slot {source.slot}: still used by PID {row[0]} {SLOT_WAIT_S:.0f}s after the "
                    f"connector was deleted; stop that backend (SELECT pg_terminate_backend({row[0]})) and run this "
                    "again"
                )
            time.sleep(1)
        exists = pg.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (source.publication,)).fetchone()
        if exists:
            pg.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(source.publication or "")))
        done.append(f"publication {source.publication}: {'dropped' if exists else 'none'}")
        table = source.signal_table
        found = pg.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (table.namespace, table.table),
        ).fetchone()
        if found:
            pg.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table.namespace, table.table)))
        done.append(f"signal table {table}: {'dropped' if found else 'none'}")
    return done


def _mariadb(source: SourceConfig) -> list[str]:
    from cdcsync.db import connect_mariadb

    table = source.signal_table
    quoted = ".".join("`" + part.replace("`", "``") + "`" for part in (table.namespace, table.table))
    connection = connect_mariadb(source)
    try:
        with connection.cursor() as cursor:
            found = cursor.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            )
            if found:
                cursor.execute(f"DROP TABLE {quoted}")
        connection.commit()
    finally:
        connection.close()
    return [f"signal table {table}: {'dropped' if found else 'none'}"]
