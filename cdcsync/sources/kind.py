"""The source contract: what cdcsync needs to know of one kind of database.

A kind is one object (``SourceKind``) with a few plain facts (its name, the
Debezium connectors that read it, how it quotes names) and roles, each a small
contract of its own:

- ``capture`` (``sources.capture.Capture``): the Debezium connector and its
  signals, the replication objects capture owns, pre-flight checks;
- ``reads`` (``sources.reads.Reads``): the catalog, rows read back, snapshot
  and JDBC reads;
- ``changes`` (``sources.changes.Changes``): a Debezium event's table and the
  version that orders it;
- ``checksums`` (``sources.checksums.Checksums``): its side of verify's range
  checksums.

A kind takes the source's settings as a ``SourceSettings`` (``sources.base``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from cdcsync.sources.base import SourceSettings, TableName
from cdcsync.sources.capture import Capture
from cdcsync.sources.changes import Changes
from cdcsync.sources.checksums import Checksums
from cdcsync.sources.reads import Reads


class SourceKind(ABC):
    """One kind of database; ``capture``, ``reads`` and ``changes`` are its roles."""

    name: ClassVar[str]  # the config's ``kind``
    connectors: ClassVar[tuple[str, ...]]  # Debezium's ``source.connector`` values of its events
    quote_mark: ClassVar[str]  # how its SQL quotes a name
    unreachable: ClassVar[tuple[type[BaseException], ...]]  # what connecting raises while it is down
    bad_value: ClassVar[tuple[type[BaseException], ...]]  # what a query raises for a literal it cannot read

    capture: Capture
    reads: Reads
    changes: Changes
    checksums: Checksums

    def quote(self, name: str) -> str:
        """A name as this database's SQL writes it, quoted whatever it holds."""
        return self.quote_mark + name.replace(self.quote_mark, self.quote_mark * 2) + self.quote_mark

    def qualified(self, table: TableName) -> str:
        """``namespace.table``, each part quoted."""
        return f"{self.quote(table.namespace)}.{self.quote(table.table)}"

    def text_literal(self, text: str) -> str:
        """A string literal of any text, which the database casts to a column's type where compared with one."""
        return "'" + text.replace("'", "''") + "'"

    @abstractmethod
    def bytes_literal(self, base64_text: str) -> str:
        """A bytes value written as its base64 text."""

    @abstractmethod
    def default_namespace(self, database: str) -> str:
        """Where a table named without a namespace is (Postgres: ``public``; MariaDB: the source's database)."""

    @abstractmethod
    def settings_defaults(self, source: SourceSettings) -> dict[str, Any]:
        """Settings a config leaves out and this kind derives from the source (a slot's name, a server id)."""

    @abstractmethod
    def connect(self, source: SourceSettings, timeout_s: int = 10) -> Any:
        """A DB-API connection as the source's user, to its database; the caller closes it."""

    @abstractmethod
    def fetch(self, source: SourceSettings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement as the source's user (autocommit) and return its rows; ``%s`` placeholders."""
