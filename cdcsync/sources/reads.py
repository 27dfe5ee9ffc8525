"""A kind's ``reads`` role: what the followers, verify, repair and the bootstrapper read from a database.

The catalog (columns, types, keys), rows read back (all of a table, or pages
in key order), the bytes a table takes, snapshot and JDBC reads, and the SQL
of range checksums.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar, NamedTuple

from cdcsync.sources.base import SourceSettings, TableName
from cdcsync.sources.snapshot import SnapshotRead

PAGE_ROWS = 5000  # rows a round trip of a streamed read


class Columns(NamedTuple):
    types: dict[str, str]  # column -> mapping type
    key: tuple[str, ...]  # the primary key's columns in key order
    filled: frozenset[str]
    millis: frozenset[str]  # timestamp columns Debezium counts in milliseconds (TableMapping.millis)
    decimals: dict[str, tuple[int, int]]  # (precision, scale) of decimals a DECIMAL(38) holds (TableMapping.decimals)
    widths: dict[str, int]  # bit(n) columns' n (TableMapping.widths)
    unlogged: frozenset[str]  # generated columns: left out of every store (TableMapping.unlogged)


class Reads(ABC):
    """What cdcsync reads from a source, and how its SQL says it."""

    jdbc_driver: ClassVar[str]  # the JDBC driver's class, for Spark's JDBC reads
    # Mapping kinds read as text over JDBC beyond those every kind reads so (``snapshot.jdbc.TEXT_KINDS``).
    jdbc_text_kinds: ClassVar[frozenset[str]]

    # Whether its connector sends some values wrong that a read by key gets right (``sync.reselect``).
    reselects: ClassVar[bool] = False

    def reselected_arrays(self, source: SourceSettings, table: TableName) -> frozenset[str]:
        """Array columns the connector may send as null though they hold a value (``sync.reselect``)."""
        return frozenset()

    def snapshot_dates_wrong(self, dates: list[str]) -> str | None:
        """SQL: a row whose date columns the connector's snapshot sends wrong; None: it sends every one right."""
        return None

    @abstractmethod
    def jdbc_url(self, source: SourceSettings) -> str:
        """The source's database as a JDBC URL (credentials apart)."""

    @abstractmethod
    def hash_bucket(self, quoted_keys: list[str]) -> str:
        """SQL: a non-negative integer hash of the key columns' values, to split a table without ranges."""

    @abstractmethod
    def snapshot(self, source: SourceSettings) -> SnapshotRead:
        """A consistent read of the source, not yet opened (``bootstrap --from source``)."""

    @abstractmethod
    def columns(self, source: SourceSettings, table: TableName) -> Columns:
        """A table's columns, their mapping types and its primary key, from the catalog (empty: no such table).

        Filled: columns with a value of their own in a row nobody wrote them in
        (a non-null DEFAULT): added to a table, they fill its existing rows
        without a change event (``sync.backfill``). Generated columns are neither
        typed nor filled: no store keeps them (``TableMapping.unlogged``).
        """

    @abstractmethod
    def every_column(self, source: SourceSettings, table: TableName) -> str:
        """The select list of every column the log carries."""

    @abstractmethod
    def stream(self, source: SourceSettings, query: str) -> Iterator[dict[str, Any]]:
        """The rows of one query, streamed from the server (not all held at once), as column -> value."""

    @abstractmethod
    def page(self, source: SourceSettings, query: str, params: tuple[Any, ...] | None) -> list[dict[str, Any]]:
        """The rows of one bounded query, in a transaction of its own."""

    @abstractmethod
    def table_bytes(self, source: SourceSettings, table: TableName) -> int:
        """The bytes a table takes on disk, its partitions' with it (0 when the catalog cannot tell)."""
