"""MariaDB: captured from its row-based binlog (full row images, GTIDs) by Debezium's MariaDB connector.

MySQL proper would be a kind of its own beside this one: its GTIDs are
``server_uuid:N``, which orders changes by another rule.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pymysql  # type: ignore[import-untyped]

from cdcsync.sources.base import SourceSettings
from cdcsync.sources.kind import SourceKind
from cdcsync.sources.mariadb.capture import MariaDBCapture
from cdcsync.sources.mariadb.changes import MariaDBChanges
from cdcsync.sources.mariadb.checksums import MariaDBChecksums
from cdcsync.sources.mariadb.connection import connect, fetch
from cdcsync.sources.mariadb.reads import MariaDBReads


class MariaDB(SourceKind):
    name = "mariadb"
    # Debezium's MySQL connector writes the same source block (GTIDs of MariaDB's shape only: see above).
    connectors = ("mariadb", "mysql")
    quote_mark = "`"
    unreachable: ClassVar[tuple[type[BaseException], ...]] = (pymysql.err.OperationalError, OSError)
    bad_value: ClassVar[tuple[type[BaseException], ...]] = (pymysql.err.DataError,)

    def __init__(self) -> None:
        self.capture, self.reads, self.changes = MariaDBCapture(), MariaDBReads(), MariaDBChanges()
        self.checksums = MariaDBChecksums()

    def text_literal(self, text: str) -> str:
        """A string literal: MariaDB reads a backslash in one as an escape."""
        return super().text_literal(text.replace("\\", "\\\\"))

    def bytes_literal(self, base64_text: str) -> str:
        return f"FROM_BASE64({self.text_literal(base64_text)})"

    def default_namespace(self, database: str) -> str:
        return database

    def settings_defaults(self, source: SourceSettings) -> dict[str, Any]:
        # A stable id per source name, away from the ids real replicas use.
        return {"server_id": source.server_id or 5400 + sum(map(ord, source.name)) % 10000}

    def connect(self, source: SourceSettings, timeout_s: int = 10) -> pymysql.connections.Connection:
        return connect(source, timeout_s)

    def fetch(self, source: SourceSettings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return fetch(source, sql, params)
