"""Postgres events: ``major`` is the ``lastCommitLsn`` of ``source.sequence`` (``cdcsync.events`` tells why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from cdcsync.errors import PoisonRecord
from cdcsync.sources.changes import MINOR_BITS, BinlogSeq, Changes, checked

# Commit records are at least 34 bytes apart: dropping 5 bits keeps them distinct and leaves 2^52 bytes of WAL.
LSN_SHIFT = 5


class PostgresChanges(Changes):
    def namespace(self, block: dict[str, Any]) -> Any:
        return block.get("schema")

    def major(self, block: dict[str, Any], snapshot_lsn: Callable[[], int | None] | None) -> int:
        sequence = block.get("sequence")
        if isinstance(sequence, str) and sequence.startswith('["'):
            # The common shape, '["<lastCommitLsn>","<lsn>"]', read without a third JSON parse per record.
            end = sequence.find('"', 2)
            digits = sequence[2:end] if end > 2 else ""
            if digits.isascii() and digits.isdigit():
                return int(digits) >> LSN_SHIFT
        try:
            pair: Any = orjson.loads(sequence) if isinstance(sequence, str) else sequence
            last_commit, own_lsn = pair
        except (TypeError, ValueError, orjson.JSONDecodeError):
            raise PoisonRecord(f"source.sequence {sequence!r} is not [lastCommitLsn, lsn]") from None
        if last_commit is None:
            # No commit processed yet by this connector: its snapshot rows rank at their own LSN (P), and the first
            # transaction after them at the higher of its own LSN and P; see cdcsync.events.
            if own_lsn is None:
                raise PoisonRecord(f"source.sequence {sequence!r} has neither lastCommitLsn nor lsn")
            lsn = _lsn_of(own_lsn, "lsn")
            floor = snapshot_lsn() if snapshot_lsn is not None else None
            return max(lsn, floor or 0) >> LSN_SHIFT
        return _lsn_of(last_commit, "lastCommitLsn") >> LSN_SHIFT

    def snapshot_version(self, block: dict[str, Any], binlog_seq: BinlogSeq | None) -> int:
        major = self.major(block, None)  # a snapshot row is never below itself: no lookup
        return checked(major << MINOR_BITS, major)

    def transaction(self, block: dict[str, Any]) -> int | None:
        txid = block.get("txId")
        return txid if isinstance(txid, int) else None

    def asks_snapshot_position(self, block: dict[str, Any]) -> bool:
        """Only an event of a connector's first transaction (no ``lastCommitLsn``) asks."""
        sequence = block.get("sequence")
        return not isinstance(sequence, str) or sequence.startswith("[null")


def _lsn_of(value: Any, what: str) -> int:
    try:
        lsn = int(value)
    except (TypeError, ValueError):
        lsn = -1
    if lsn < 0:
        raise PoisonRecord(f"source.sequence {what} {value!r} is not an LSN (a number >= 0)")
    return lsn
