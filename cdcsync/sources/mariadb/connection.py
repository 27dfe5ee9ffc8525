"""A connection to a MariaDB source, as its user."""

from __future__ import annotations

import pymysql  # type: ignore[import-untyped]

from cdcsync.sources.base import SourceSettings


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
