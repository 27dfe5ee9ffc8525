"""Where a consistent read of a source stands in its change log (``bootstrap --from source``).

A read of the source reflects some changes and not others. To continue from it
with no gap and no double apply, the bootstrapper needs three things from each
source, and this module gives them for Postgres and MariaDB:

- the **read** itself: the JDBC session statement that puts every parallel
  Spark JDBC reader into the same snapshot (Postgres), or into a snapshot
  whose binlog position each chunk reports (MariaDB);
- the **version** of a snapshot row, comparable with change versions
  (``cdcsync.events``): at least the version of every change the read
  reflects, and below every change it does not;
- when the connector has **passed** the read: every change the read reflects
  is in Kafka, so the end offsets captured after that split the log exactly.

Postgres: one ``REPEATABLE READ`` transaction exports its snapshot
(``pg_export_snapshot``) and every reader imports it, so all chunks see one
instant. Whether a change is reflected is decided by its transaction id
against the snapshot's ``xmin:xmax:xip`` (``pg_current_snapshot``): exactly
MVCC's own rule, so a transaction that began before the snapshot and
committed after it is correctly *not* reflected, however small its LSNs.
Row versions are the highest version among reflected changes, read from the
log (``lastCommitLsn`` only grows in commit order, so every unreflected
change is above it).

MariaDB has no snapshot export: each chunk opens its own ``START TRANSACTION
WITH CONSISTENT SNAPSHOT`` and reads the binlog position of that snapshot
(``binlog_snapshot_file``/``_position``) in the same query. The position
maps to a GTID (``BINLOG_GTID_POS``), and a row's version is
``seq << 16 | 0xFFFF``: above every change of transactions up to ``seq``,
below every later one. Chunks may stand at different positions; each row
carries its own, which is all the apply rule needs.

Debezium's own MariaDB snapshot rows (``op=r``) carry the binlog position they
were read at and no GTID. ``cdcsync.resolvers.BinlogPositions`` maps that position the same
way, so a row of a connector's snapshot and a row of ``bootstrap --from
source`` read at the same position get the same version
(``cdcsync.events``: ``parse_record(..., binlog_seq=...)``).

A new Postgres connector's snapshot rows rank at the snapshot's LSN P, and
the first transaction it streams after them carries no ``lastCommitLsn``.
``cdcsync.resolvers.SnapshotLsns`` finds P for that transaction's events: the snapshot rows
before each of them in its partition (``parse_record(..., snapshot_lsn=...)``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdcsync import resolvers
from cdcsync.config import SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.db import connect_postgres
from cdcsync.errors import FatalError
from cdcsync.events import MINOR_BITS, MINOR_MAX

XID_MOD = 1 << 32  # Debezium reports 32-bit xids; the snapshot's are 64-bit (epoch << 32 | xid)
MARIA_FILE, MARIA_POS = "_cdcsync_binlog_file", "_cdcsync_binlog_pos"


@dataclass
class PostgresRead:
    """An exported Postgres snapshot, held open until ``close``."""

    source: SourceConfig
    snapshot_id: str = ""
    xmin: int = 0
    xmax: int = 0
    xip: frozenset[int] = frozenset()
    wal_lsn: int = 0  # WAL insert position just after the snapshot: every reflected commit is below it
    _conn: Any = field(default=None, repr=False)

    def open(self) -> PostgresRead:
        self._conn = connect_postgres(self.source)
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = self._conn.execute(
            "SELECT pg_export_snapshot(), pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
        ).fetchone()
        assert row is not None
        snapshot_id, visibility, lsn = row
        xmin, xmax, xip = visibility.split(":")
        self.snapshot_id, self.xmin, self.xmax = snapshot_id, int(xmin), int(xmax)
        self.xip = frozenset(int(x) % XID_MOD for x in xip.split(",") if x)
        hi, lo = lsn.split("/")
        self.wal_lsn = int(hi, 16) << 32 | int(lo, 16)
        return self

    def session_init(self) -> str:
        """Run by each JDBC reader before its query: join the exported snapshot."""
        return (  # an interval as ISO 8601 text, the form sync.values reads (Debezium's, parts left out); money
            # in the C locale's form, which sync.values reads as its digits
            f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '{self.snapshot_id}'; "
            "SET IntervalStyle = 'iso_8601'; SET lc_monetary = 'C'"
        )

    def count(self, qualified: str) -> int:
        return int(self._conn.execute(f"SELECT count(*) FROM {qualified}").fetchone()[0])

    def key_bounds(self, qualified: str, column: str) -> tuple[Any, Any]:
        return tuple(self._conn.execute(f'SELECT min("{column}"), max("{column}") FROM {qualified}').fetchone())

    def reflects(self, txid: int) -> bool:
        """MVCC visibility of a transaction in this snapshot (modulo-2^32 comparison, as Postgres does)."""
        xid = txid % XID_MOD
        if xid in self.xip:
            return False
        behind = (self.xmax - xid) % XID_MOD  # how far below xmax, if it is below at all
        return 0 < behind <= 1 << 31

    def mark(self) -> None:
        """Commit a WAL message after the snapshot, so the connector has a commit to pass even when idle."""
        with connect_postgres(self.source) as conn:
            conn.execute("SELECT pg_logical_emit_message(true, 'cdcsync.bootstrap', %s)", (self.snapshot_id,))

    def passed(self, offset: dict[str, Any]) -> bool:
        """Has the connector committed an offset past the snapshot? (then its records are all in Kafka)"""
        return int(offset.get("lsn_commit") or 0) >= self.wal_lsn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class MariaDBRead:
    """Per-chunk consistent snapshots of MariaDB, each reporting its binlog position."""

    source: SourceConfig
    highest_seq: int = 0  # the furthest position any chunk read at
    _gtids: dict[tuple[str, int], int] = field(default_factory=dict)

    def open(self) -> MariaDBRead:
        return self

    def session_init(self) -> str:
        return "SET time_zone = '+00:00'; START TRANSACTION WITH CONSISTENT SNAPSHOT"

    def position_columns(self) -> str:
        """Columns that report, inside the chunk's own snapshot, where it stands in the binlog."""
        status = "(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = '{}')"
        return (
            f"{status.format('BINLOG_SNAPSHOT_FILE')} AS {MARIA_FILE}, "
            f"{status.format('BINLOG_SNAPSHOT_POSITION')} AS {MARIA_POS}"
        )

    def count(self, qualified: str) -> int:
        return int(self._query(f"SELECT count(*) FROM {qualified}")[0][0])

    def key_bounds(self, qualified: str, column: str) -> tuple[Any, Any]:
        return tuple(self._query(f"SELECT min(`{column}`), max(`{column}`) FROM {qualified}")[0])

    def version(self, binlog_file: str, binlog_pos: int) -> int:
        """The version of a row read at this binlog position: above every change it reflects."""
        key = (binlog_file, int(binlog_pos))
        if key not in self._gtids:
            seq = resolvers.seq_at(self.source, *key)
            if seq is None:
                raise FatalError(
                    f"source {self.source.name}: binlog position {key} has no GTID position; is binary logging on?"
                )
            self._gtids[key] = seq
        seq = self._gtids[key]
        self.highest_seq = max(self.highest_seq, seq)
        return (seq << MINOR_BITS) | MINOR_MAX

    def reflects(self, gtid_seq: int) -> bool:
        return gtid_seq <= self.highest_seq

    def mark(self) -> None:
        """Nothing to write: the connector's offset reaches the last GTID even when the server is idle."""

    def passed(self, offset: dict[str, Any]) -> bool:
        seen = [
            resolvers.domain0_seq(self.source.name, offset.get(k) or "", strict=False)
            for k in ("gtids", "transaction_id")
        ]
        return max(seen) >= self.highest_seq

    def close(self) -> None:
        pass

    def _query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        return resolvers.query(self.source, sql, params)


SourceRead = PostgresRead | MariaDBRead


def open_read(source: SourceConfig) -> SourceRead:
    return (PostgresRead(source) if source.kind == "postgres" else MariaDBRead(source)).open()


def wait_passed(read: SourceRead, connect: ConnectClient, timeout_s: float = 300, poll_s: float = 0.5) -> float:
    """Block until the connector's committed offset is past the read; return the seconds waited.

    Kafka Connect commits a source offset only once every record before it is
    acknowledged by Kafka, so from then on the reflected changes are all in
    their topics. How soon depends on the worker's ``offset.flush.interval.ms``.
    """
    read.mark()
    name, started = read.source.name, time.monotonic()
    while True:
        offsets = connect.offsets(name)
        if any(read.passed(o.get("offset") or {}) for o in offsets):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise FatalError(
                f"connector {name} has not passed the snapshot's position within {timeout_s:.0f}s "
                f"(committed offsets: {orjson.dumps(offsets).decode()[:300]}); is it running? "
                "(cdcsync connectors status)"
            )
        time.sleep(poll_s)
