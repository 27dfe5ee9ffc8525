"""A consistent read of a source and where it stands in its change log (``bootstrap --from source``).

To continue from a read of the source with no gap and no double apply, the
bootstrapper (``cdcsync.snapshot.source``) needs from each kind:

- the **read** itself: the JDBC session statement that puts every parallel
  Spark JDBC reader into one snapshot, or into a snapshot whose position each
  piece reports (``session_init``, ``relation``);
- the **version** of a snapshot row, comparable with change versions
  (``cdcsync.events``): at least the version of every change the read
  reflects, and below every change it does not (``versions_of``);
- when the connector has **passed** the read: every change the read reflects
  is in Kafka, so the end offsets captured after that split the log exactly
  (``mark``, ``passed``).

A read is of one of two shapes (``one_snapshot``): every piece in one
snapshot, whose changes are told apart by ``reflects`` before the rows are
read (Postgres); or each piece in a snapshot of its own, each row carrying
the position it was read at (``POSITION``), aligned after the rows (MariaDB).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from cdcsync.sources.base import SourceSettings

if TYPE_CHECKING:
    import pyarrow as pa

# The columns a piece of a read of several snapshots carries: where in the log its snapshot stands.
POSITION = ("_cdcsync_binlog_file", "_cdcsync_binlog_pos")
Versions = int | dict[tuple[str, int], int]  # one version for every row, or one per position a piece was read at


class SnapshotRead(ABC):
    """A consistent read of a source, held open until ``close``."""

    source: SourceSettings
    one_snapshot: ClassVar[bool]  # every piece in one snapshot, its log split before the rows are read

    @abstractmethod
    def open(self) -> SnapshotRead:
        """The read, started."""

    @abstractmethod
    def session_init(self) -> str:
        """Run by each JDBC reader before its query: join the read's snapshot (or start its own)."""

    def relation(self, qualified: str, types: Mapping[str, str], widths: Mapping[str, int]) -> str:
        """What a piece's JDBC query reads from: the table, or a select over it that adds ``POSITION``."""
        return qualified

    @abstractmethod
    def count(self, qualified: str) -> int:
        """The table's rows in the read."""

    @abstractmethod
    def key_bounds(self, qualified: str, column: str) -> tuple[Any, Any]:
        """The smallest and largest value of an integer key column in the read."""

    @abstractmethod
    def versions_of(self, piece: pa.Table, row_version: int) -> Versions:
        """The versions of a piece's rows: ``row_version`` (one snapshot), or one per position read at."""

    @abstractmethod
    def reflects(self, transaction: int) -> bool:
        """Whether the read reflects a transaction (its id as the connector reports it)."""

    @abstractmethod
    def mark(self) -> None:
        """Give the connector something past the read to pass, even when the source is idle."""

    @abstractmethod
    def passed(self, offset: dict[str, Any]) -> bool:
        """Has the connector committed an offset past the read? (then its records are all in Kafka)"""

    def describe(self) -> str:
        """What a log line says of the read."""
        return f"source={self.source.name}"

    @abstractmethod
    def close(self) -> None:
        """End the read."""
