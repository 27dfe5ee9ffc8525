"""Postgres: captured from its WAL by Debezium's Postgres connector (pgoutput, a slot and a publication)."""

from __future__ import annotations

from typing import Any, ClassVar

import psycopg

from cdcsync.sources.base import SourceSettings
from cdcsync.sources.kind import SourceKind
from cdcsync.sources.postgres.capture import PostgresCapture
from cdcsync.sources.postgres.changes import PostgresChanges
from cdcsync.sources.postgres.checksums import PostgresChecksums
from cdcsync.sources.postgres.connection import connect, fetch
from cdcsync.sources.postgres.reads import PostgresReads


class Postgres(SourceKind):
    name = "postgres"
    connectors = ("postgresql",)
    quote_mark = '"'
    unreachable: ClassVar[tuple[type[BaseException], ...]] = (psycopg.OperationalError, OSError)
    bad_value: ClassVar[tuple[type[BaseException], ...]] = (psycopg.DataError,)

    def __init__(self) -> None:
        self.capture, self.reads, self.changes = PostgresCapture(), PostgresReads(), PostgresChanges()
        self.checksums = PostgresChecksums()

    def bytes_literal(self, base64_text: str) -> str:
        return f"decode({self.text_literal(base64_text)}, 'base64')"

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
        return fetch(source, sql, params)
