"""A kind's ``changes`` role: where a Debezium event's table is, and the part of its version a kind decides.

A version is ``major << MINOR_BITS | minor`` (``cdcsync.events`` tells why):
``minor``, the event's place in its transaction, is the same for every kind;
``major``, which orders transactions, is the kind's, read from the event's
``source`` block.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from cdcsync.errors import PoisonRecord
from cdcsync.sources.base import SourceSettings

MINOR_BITS = 16
MINOR_MAX = (1 << MINOR_BITS) - 1

BinlogSeq = Callable[[str, str, int], "int | None"]
"""``(source name, binlog file, position) -> GTID sequence`` of the last transaction before it, or None."""


def checked(version: int, major: int) -> int:
    """``version``, refused where it does not fit Elasticsearch's signed 64 bits."""
    if version >= 1 << 63:
        raise PoisonRecord(f"version overflows 64 bits (major {major})")
    return version


class Changes(ABC):
    """What ``cdcsync.events`` asks a kind of one event's ``source`` block."""

    @abstractmethod
    def namespace(self, block: dict[str, Any]) -> Any:
        """The schema or database of the event's table, as the block names it."""

    @abstractmethod
    def major(self, block: dict[str, Any], snapshot_lsn: Callable[[], int | None] | None) -> int:
        """The ``major`` of a streamed change (not a snapshot row)."""

    @abstractmethod
    def snapshot_version(self, block: dict[str, Any], binlog_seq: BinlogSeq | None) -> int:
        """The whole version of a snapshot row (``op=r``): above every change it reflects, below the rest."""

    @abstractmethod
    def transaction(self, block: dict[str, Any]) -> int | None:
        """The event's transaction as ``SnapshotRead.reflects`` takes it; None where the block names none."""

    def position_seq(self, source: SourceSettings, log_file: str, position: int) -> int | None:
        """For a snapshot row that names where in the log it was read (``BinlogSeq``): the sequence of the last
        transaction before it; None where unknown. Only a kind whose snapshot rows name a position is asked."""
        return None

    def asks_snapshot_position(self, block: dict[str, Any]) -> bool:
        """Whether ``major`` needs the snapshot's position before the event (``snapshot_lsn``)."""
        return False
