"""MariaDB: captured from its row-based binlog (full row images, GTIDs) by Debezium's MariaDB connector.

MySQL proper would be a kind of its own beside this one: its GTIDs are
``server_uuid:N``, which orders changes by another rule.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pymysql  # type: ignore[import-untyped]

from cdcsync.sources.base import SourceKind, SourceSettings
from cdcsync.sources.mariadb.capture import MariaDBCapture
from cdcsync.sources.mariadb.changes import MariaDBChanges
from cdcsync.sources.mariadb.reads import MariaDBReads


def connect(source: SourceSettings, timeout_s: int = 10, database: bool = True) -> pymysql.connections.Connection:
    """A connection as the source's user (to its database, or to none); the caller closes it."""
    return pymysql.connect(
        host=source.host,
        port=source.port,
        user=source.user,
        database=source.database if database else None,
        password=source.password.get_secret_value(),
        connect_timeout=timeout_s,
    )


class MariaDB(SourceKind):
    name = "mariadb"
    # Debezium's MySQL connector writes the same source block (GTIDs of MariaDB's shape only: see above).
    connectors = ("mariadb", "mysql")
    quote_mark = "`"
    unreachable: ClassVar[tuple[type[BaseException], ...]] = (pymysql.err.OperationalError, OSError)

    def __init__(self) -> None:
        self.capture, self.reads, self.changes = MariaDBCapture(), MariaDBReads(), MariaDBChanges()

    def default_namespace(self, database: str) -> str:
        return database

    def settings_defaults(self, source: SourceSettings) -> dict[str, Any]:
        # A stable id per source name, away from the ids real replicas use.
        return {"server_id": source.server_id or 5400 + sum(map(ord, source.name)) % 10000}

    def connect(self, source: SourceSettings, timeout_s: int = 10) -> pymysql.connections.Connection:
        return connect(source, timeout_s)

    def fetch(self, source: SourceSettings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = connect(source)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params or None)
                rows = list(cur.fetchall()) if cur.description else []
            conn.commit()
            return rows
        finally:
            conn.close()
