"""Postgres: captured from its WAL by Debezium's Postgres connector (pgoutput, a slot and a publication)."""

from __future__ import annotations

from typing import Any, ClassVar

import psycopg

from cdcsync.sources.base import SourceKind, SourceSettings
from cdcsync.sources.postgres.capture import PostgresCapture
from cdcsync.sources.postgres.changes import PostgresChanges
from cdcsync.sources.postgres.reads import PostgresReads


def connect(source: SourceSettings, timeout_s: int = 10, autocommit: bool = False) -> psycopg.Connection:
    """A connection as the source's user to its database; the caller closes it."""
    return psycopg.connect(
        autocommit=autocommit,
        host=source.host,
        port=source.port,
        dbname=source.database,
        user=source.user,
        password=source.password.get_secret_value(),
        connect_timeout=timeout_s,
    )


class Postgres(SourceKind):
    name = "postgres"
    connectors = ("postgresql",)
    quote_mark = '"'
    unreachable: ClassVar[tuple[type[BaseException], ...]] = (psycopg.OperationalError, OSError)

    def __init__(self) -> None:
        self.capture, self.reads, self.changes = PostgresCapture(), PostgresReads(), PostgresChanges()

    def default_namespace(self, database: str) -> str:
        return "public"

    def settings_defaults(self, source: SourceSettings) -> dict[str, Any]:
        return {
            "slot": source.slot or f"cdcsync_{source.name}",
            "publication": source.publication or f"cdcsync_{source.name}",
        }

    def connect(self, source: SourceSettings, timeout_s: int = 10) -> psycopg.Connection:
        return connect(source, timeout_s)

    def fetch(self, source: SourceSettings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with connect(source, autocommit=True) as conn:
            cur = conn.execute(sql, params or None)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
