"""A read of MariaDB in per-piece consistent snapshots, each reporting its binlog position (``sources.snapshot``).

MariaDB has no snapshot export: each piece opens its own ``START TRANSACTION
WITH CONSISTENT SNAPSHOT`` and reads the binlog position of that snapshot
(``binlog_snapshot_file``/``_position``) in the same query. The position
maps to a GTID (``BINLOG_GTID_POS``), and a row's version is
``seq << 16 | 0xFFFF``: above every change of transactions up to ``seq``,
below every later one. Pieces may stand at different positions; each row
carries its own, which is all the apply rule needs.

Debezium's own MariaDB snapshot rows (``op=r``) carry the binlog position they
were read at and no GTID. ``cdcsync.resolvers.BinlogPositions`` maps that
position the same way, so a row of a connector's snapshot and a row of
``bootstrap --from source`` read at the same position get the same version
(``cdcsync.events``: ``parse_record(..., binlog_seq=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from cdcsync.errors import FatalError
from cdcsync.sources.base import SourceSettings
from cdcsync.sources.changes import MINOR_BITS, MINOR_MAX
from cdcsync.sources.mariadb.binlog import domain0_seq, query, seq_at
from cdcsync.sources.snapshot import POSITION, SnapshotRead, Versions

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class MariaDBRead(SnapshotRead):
    """Per-chunk consistent snapshots of MariaDB, each reporting its binlog position."""

    source: SourceSettings
    highest_seq: int = 0  # the furthest position any chunk read at
    _gtids: dict[tuple[str, int], int] = field(default_factory=dict)
    one_snapshot: ClassVar[bool] = False

    def open(self) -> MariaDBRead:
        return self

    def session_init(self) -> str:
        return "SET time_zone = '+00:00'; START TRANSACTION WITH CONSISTENT SNAPSHOT"

    def relation(self, qualified: str, types: Mapping[str, str], widths: Mapping[str, int]) -> str:
        """A select that reports, inside the piece's own snapshot, where it stands in the binlog."""
        status = "(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = '{}')"
        file, pos = POSITION
        at = f"{status.format('BINLOG_SNAPSHOT_FILE')} AS {file}, {status.format('BINLOG_SNAPSHOT_POSITION')} AS {pos}"
        return f"(SELECT {_columns(types, widths)}, {at} FROM {qualified} t) AS cdcsync_chunk"

    def count(self, qualified: str) -> int:
        return int(self._query(f"SELECT count(*) FROM {qualified}")[0][0])

    def key_bounds(self, qualified: str, column: str) -> tuple[Any, Any]:
        quoted = "`" + column.replace("`", "``") + "`"
        return tuple(self._query(f"SELECT min({quoted}), max({quoted}) FROM {qualified}")[0])

    def versions_of(self, piece: pa.Table, row_version: int) -> Versions:
        at = piece.select(list(POSITION)).group_by(list(POSITION)).aggregate([])
        positions = zip(at.column(POSITION[0]).to_pylist(), at.column(POSITION[1]).to_pylist(), strict=True)
        return {(file, int(pos)): self.version(file, int(pos)) for file, pos in positions}

    def version(self, binlog_file: str, binlog_pos: int) -> int:
        """The version of a row read at this binlog position: above every change it reflects."""
        key = (binlog_file, int(binlog_pos))
        if key not in self._gtids:
            seq = seq_at(self.source, *key)
            if seq is None:
                raise FatalError(
                    f"source {self.source.name}: binlog position {key} has no GTID position; is binary logging on?"
                )
            self._gtids[key] = seq
        seq = self._gtids[key]
        self.highest_seq = max(self.highest_seq, seq)
        return (seq << MINOR_BITS) | MINOR_MAX

    def reflects(self, transaction: int) -> bool:
        """``transaction``: a GTID's sequence number."""
        return transaction <= self.highest_seq

    def mark(self) -> None:
        """Nothing to write: the connector's offset reaches the last GTID even when the server is idle."""

    def passed(self, offset: dict[str, Any]) -> bool:
        seen = [domain0_seq(self.source.name, offset.get(k) or "", strict=False) for k in ("gtids", "transaction_id")]
        return max(seen) >= self.highest_seq

    def close(self) -> None:
        pass

    def _query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        return query(self.source, sql, params)


def _columns(types: Mapping[str, str], widths: Mapping[str, int]) -> str:
    """A piece's select list: MariaDB's UUID type reaches Spark as JDBC OTHER, which it cannot read, and the
    driver renders a BIT(n) as bytes no reader agrees on: each as text, a BIT as its n digits."""
    special = {c: kind for c, kind in types.items() if kind in ("uuid", "bits")}
    if not special:
        return "t.*"

    def column(c: str) -> str:
        quoted = "`" + c.replace("`", "``") + "`"
        if special.get(c) == "uuid":
            return f"CAST(t.{quoted} AS CHAR(36)) AS {quoted}"
        if special.get(c) == "bits":
            return f"LPAD(BIN(t.{quoted}), {widths.get(c, 1)}, '0') AS {quoted}"
        return f"t.{quoted}"

    return ", ".join(column(c) for c in types)
