"""A kind's ``checksums`` role: its side of ``verify``'s range checksums (``cdcsync.sync.verify.ranges``).

The SQL that writes a row's text and sums the hashes of a range's rows where
the source stores them. Equal stored values must give the same bytes as
Spark's side gives a Delta table's: timestamps as microseconds since 1970
(Delta's TIMESTAMP is UTC; a timestamp without zone is read as UTC),
dates as days since 1970.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from cdcsync.sources.base import SourceSettings, TableName

Catalog = tuple[dict[str, str], int, int, int]  # data types by column, smallest and largest key, estimated rows


class Checksums(ABC):
    """A kind's SQL for range checksums."""

    # A row text's piece for a non-null value ({c}: the column, quoted), by the column's data type and the kind
    # the mapping gives it; a pair absent here sends the table the row path.
    forms: ClassVar[dict[tuple[str, str], str]]
    # A field's piece ({t}: the value's text): (text that may hold anything, any other value).
    pieces: ClassVar[tuple[str, str]]
    key_types: ClassVar[frozenset[str]]  # data types of a key whose ranges are counted

    @abstractmethod
    def as_bigint(self, key: str) -> str:
        """The key column's SQL as a signed 64-bit integer."""

    @abstractmethod
    def integer_division(self) -> str:
        """The operator that divides integers to an integer."""

    @abstractmethod
    def one_of(self, expression: str, numbers: str) -> str:
        """SQL: ``expression`` is one of these comma-separated integers."""

    @abstractmethod
    def concat(self, parts: list[str]) -> str:
        """SQL: the parts' texts joined."""

    @abstractmethod
    def catalog(self, source: SourceSettings, table: TableName, key: str) -> Catalog | None:
        """The table's columns' data types, its smallest and largest key, and its rows by the catalog's estimate;
        None where the ranges cannot be compared (Postgres text not in UTF-8)."""

    @abstractmethod
    def sums_query(self, bucket: str, text: str, table: str) -> str:
        """SQL: per range ``b``, its rows, and the sums of two 60-bit slices of its rows' MD5 (the text's)."""
