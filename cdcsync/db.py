"""Connections to a source database from its config: one place for drivers and timeouts."""

from __future__ import annotations

from typing import Any

import psycopg
import pymysql  # type: ignore[import-untyped]

from cdcsync.config import SourceConfig

# What a connection attempt raises while the database is down or restarting (not a query's own error).
UNREACHABLE: tuple[type[BaseException], ...] = (psycopg.OperationalError, pymysql.err.OperationalError, OSError)


def connect_postgres(source: SourceConfig, timeout_s: int = 10, autocommit: bool = False) -> psycopg.Connection:
    return psycopg.connect(
        autocommit=autocommit,
        host=source.host,
        port=source.port,
        dbname=source.database,
        user=source.user,
        password=source.password.get_secret_value(),
        connect_timeout=timeout_s,
    )


def connect_mariadb(source: SourceConfig, timeout_s: int = 10, database: bool = True) -> pymysql.connections.Connection:
    return pymysql.connect(
        host=source.host,
        port=source.port,
        user=source.user,
        database=source.database if database else None,
        password=source.password.get_secret_value(),
        connect_timeout=timeout_s,
    )


def fetch(source: SourceConfig, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement as the source's user (autocommit) and return its rows; ``%s`` placeholders on both kinds."""
    if source.kind == "postgres":
        with connect_postgres(source, autocommit=True) as conn:
            cur = conn.execute(sql, params or None)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
    conn = connect_mariadb(source)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            rows = list(cur.fetchall()) if cur.description else []
        conn.commit()
        return rows
    finally:
        conn.close()
