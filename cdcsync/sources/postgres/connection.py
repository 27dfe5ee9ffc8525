"""A connection to a Postgres source, as its user, to its database."""

from __future__ import annotations

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
