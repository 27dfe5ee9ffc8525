"""MariaDB's binlog positions as GTID sequences: what orders a snapshot row read at a position."""

from __future__ import annotations

from typing import Any

import pymysql  # type: ignore[import-untyped]

from cdcsync.errors import FatalError
from cdcsync.sources.base import SourceSettings
from cdcsync.sources.mariadb.connection import connect


def seq_at(source: SourceSettings, binlog_file: str, binlog_pos: int) -> int | None:
    """The domain-0 GTID sequence of the last transaction before this binlog position; None if unknown."""
    rows = query(source, "SELECT BINLOG_GTID_POS(%s, %s)", (binlog_file, binlog_pos))
    position = rows[0][0] if rows else None
    return None if position is None else domain0_seq(source.name, position)


def query(source: SourceSettings, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    conn = connect(source)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    except pymysql.MySQLError as err:
        raise FatalError(f"source {source.name}: {sql.split()[0]} failed: {err}") from None
    finally:
        conn.close()


def domain0_seq(source: str, position: str, strict: bool = True) -> int:
    """The sequence number of GTID domain 0 in a position like ``0-1-42,1-5-7``."""
    for gtid in position.split(","):
        parts = gtid.strip().split("-")
        if len(parts) == 3 and parts[0] == "0" and parts[2].isdigit():
            return int(parts[2])
    if strict and position:
        raise FatalError(f"source {source}: GTID position {position!r} has no domain 0; cdcsync orders domain 0 only")
    return 0
