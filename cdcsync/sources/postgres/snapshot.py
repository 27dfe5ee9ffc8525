"""A read of Postgres in one exported snapshot, joined by every JDBC reader (``sources.snapshot``).

One ``REPEATABLE READ`` transaction exports its snapshot
(``pg_export_snapshot``) and every reader imports it, so all pieces see one
instant. Whether a change is reflected is decided by its transaction id
against the snapshot's ``xmin:xmax:xip`` (``pg_current_snapshot``): exactly
MVCC's own rule, so a transaction that began before the snapshot and
committed after it is correctly *not* reflected, however small its LSNs.
Row versions are the highest version among reflected changes, read from the
log (``lastCommitLsn`` only grows in commit order, so every unreflected
change is above it).

A new Postgres connector's snapshot rows rank at the snapshot's LSN P, and
the first transaction it streams after them carries no ``lastCommitLsn``.
``cdcsync.resolvers.SnapshotLsns`` finds P for that transaction's events: the
snapshot rows before each of them in its partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from cdcsync.sources.base import SourceSettings
from cdcsync.sources.postgres.connection import connect
from cdcsync.sources.snapshot import SnapshotRead, Versions

if TYPE_CHECKING:
    import pyarrow as pa

XID_MOD = 1 << 32  # Debezium reports 32-bit xids; the snapshot's are 64-bit (epoch << 32 | xid)


@dataclass
class PostgresRead(SnapshotRead):
    """An exported Postgres snapshot, held open until ``close``."""

    source: SourceSettings
    snapshot_id: str = ""
    xmin: int = 0
    xmax: int = 0
    xip: frozenset[int] = frozenset()
    wal_lsn: int = 0  # WAL insert position just after the snapshot: every reflected commit is below it
    _conn: Any = field(default=None, repr=False)
    one_snapshot: ClassVar[bool] = True

    def open(self) -> PostgresRead:
        self._conn = connect(self.source)
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
        quoted = '"' + column.replace('"', '""') + '"'
        return tuple(self._conn.execute(f"SELECT min({quoted}), max({quoted}) FROM {qualified}").fetchone())

    def versions_of(self, piece: pa.Table, row_version: int) -> Versions:
        return row_version

    def reflects(self, transaction: int) -> bool:
        """MVCC visibility of a transaction in this snapshot (modulo-2^32 comparison, as Postgres does)."""
        xid = transaction % XID_MOD
        if xid in self.xip:
            return False
        behind = (self.xmax - xid) % XID_MOD  # how far below xmax, if it is below at all
        return 0 < behind <= 1 << 31

    def mark(self) -> None:
        """Commit a WAL message after the snapshot, so the connector has a commit to pass even when idle."""
        with connect(self.source) as conn:
            conn.execute("SELECT pg_logical_emit_message(true, 'cdcsync.bootstrap', %s)", (self.snapshot_id,))

    def passed(self, offset: dict[str, Any]) -> bool:
        """Has the connector committed an offset past the snapshot? (then its records are all in Kafka)"""
        return int(offset.get("lsn_commit") or 0) >= self.wal_lsn

    def describe(self) -> str:
        return (
            f"source={self.source.name} snapshot={self.snapshot_id} xmin={self.xmin} xmax={self.xmax}"
            f" in_progress={len(self.xip)} wal_lsn={self.wal_lsn}"
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
