"""A connection to a Postgres source, as its user, to its database."""

from __future__ import annotations

from typing import Any

import psycopg

from cdcsync.sources.base import SourceSettings


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


def fetch(source: SourceSettings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement (autocommit) and return its rows."""
    with connect(source, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)  # type: ignore[arg-type]
        return list(cur.fetchall()) if cur.description else []
