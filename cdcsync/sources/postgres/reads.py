"""Reads from Postgres: its catalog, rows by key, snapshot and JDBC reads, range checksums."""

from __future__ import annotations

from cdcsync.sources.reads import Reads


class PostgresReads(Reads):
    pass
