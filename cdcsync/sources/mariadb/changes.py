"""MariaDB (and MySQL) events: ``major`` is the GTID's sequence number (``cdcsync.events`` tells why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdcsync.errors import PoisonRecord
from cdcsync.sources.base import SourceSettings
from cdcsync.sources.changes import MINOR_BITS, MINOR_MAX, BinlogSeq, Changes, checked
from cdcsync.sources.mariadb.binlog import seq_at


class MariaDBChanges(Changes):
    def namespace(self, block: dict[str, Any]) -> Any:
        return block.get("db")

    def major(self, block: dict[str, Any], snapshot_lsn: Callable[[], int | None] | None) -> int:
        gtid = block.get("gtid")
        if not isinstance(gtid, str):
            raise PoisonRecord(
                "source.gtid is missing; enable GTIDs on the server (MariaDB: always on; MySQL: gtid_mode)"
            )
        parts = gtid.split("-")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise PoisonRecord(f"source.gtid {gtid!r} is not domain-server-sequence")
        if parts[0] != "0":
            raise PoisonRecord(f"source.gtid {gtid!r} is in GTID domain {parts[0]}; cdcsync orders one domain (0)")
        return int(parts[2])

    def transaction(self, block: dict[str, Any]) -> int | None:
        try:
            return self.major(block, None)
        except PoisonRecord:
            return None

    def position_seq(self, source: SourceSettings, log_file: str, position: int) -> int | None:
        return seq_at(source, log_file, position)

    def snapshot_version(self, block: dict[str, Any], binlog_seq: BinlogSeq | None) -> int:
        if isinstance(block.get("gtid"), str):
            # Incremental snapshot: emitted while streaming, at this transaction, and reflecting none of it.
            major = self.major(block, None)
            return checked(major << MINOR_BITS, major)
        file, pos = block.get("file"), block.get("pos")
        if binlog_seq is None or not isinstance(file, str) or not isinstance(pos, int):
            return 0
        seq = binlog_seq(str(block.get("name", "")), file, pos)
        if seq is None:
            raise PoisonRecord(f"snapshot row at binlog {file}:{pos} has no GTID position (binlog purged?)")
        return checked((seq << MINOR_BITS) | MINOR_MAX, seq)
