"""A connection to a MariaDB source, as its user."""

from __future__ import annotations

from typing import Any

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


def fetch(source: SourceSettings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement as the source's user and return its rows (committed)."""
    conn = connect(source)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            rows = list(cur.fetchall()) if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()
