"""Connections to a source database from its config: each kind connects its own way (``cdcsync.sources``)."""

from __future__ import annotations

from typing import Any

from cdcsync.config import SourceConfig
from cdcsync.sources import KINDS, kind_of
from cdcsync.sources.mariadb import connect as connect_mariadb
from cdcsync.sources.postgres import connect as connect_postgres

__all__ = ["UNREACHABLE", "connect_mariadb", "connect_postgres", "fetch"]

# What a connection attempt raises while the database is down or restarting (not a query's own error).
UNREACHABLE: tuple[type[BaseException], ...] = tuple({e: None for k in KINDS.values() for e in k.unreachable})


def fetch(source: SourceConfig, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement as the source's user (autocommit) and return its rows; ``%s`` placeholders on every kind."""
    return kind_of(source).fetch(source, sql, params)
