"""The source contract: what cdcsync needs to know of one kind of database.

A kind is one object (``SourceKind``) with a few plain facts (its name, the
Debezium connectors that read it, how it quotes names) and roles, each a small
contract of its own:

- ``capture`` (``sources.capture.Capture``): the Debezium connector and its
  signals, the replication objects capture owns, pre-flight checks;
- ``reads`` (``sources.reads.Reads``): the catalog, keys and values read back,
  snapshot and JDBC reads, range checksums;
- ``changes`` (``sources.changes.Changes``): a Debezium event's table and the
  version that orders it.

A kind takes the source's settings as a ``SourceSettings`` (a ``SourceConfig``
is one), so this package never imports the config models: the models ask it
for a kind's defaults instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from cdcsync.sources.capture import Capture
    from cdcsync.sources.changes import Changes
    from cdcsync.sources.reads import Reads


class Secret(Protocol):
    def get_secret_value(self) -> str: ...


class TableName(Protocol):
    """A table of a source: ``namespace`` is the Postgres schema or the MariaDB database."""

    @property
    def namespace(self) -> str: ...

    @property
    def table(self) -> str: ...


class SourceSettings(Protocol):
    """What a kind reads of a source's config (``cdcsync.config.SourceConfig``)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def database(self) -> str: ...

    @property
    def user(self) -> str: ...

    @property
    def password(self) -> Secret: ...

    @property
    def slot(self) -> str | None: ...

    @property
    def publication(self) -> str | None: ...

    @property
    def server_id(self) -> int | None: ...


class SourceKind(ABC):
    """One kind of database; ``capture``, ``reads`` and ``changes`` are its roles."""

    name: ClassVar[str]  # the config's ``kind``
    connectors: ClassVar[tuple[str, ...]]  # Debezium's ``source.connector`` values of its events
    quote_mark: ClassVar[str]  # how its SQL quotes a name
    unreachable: ClassVar[tuple[type[BaseException], ...]]  # what connecting raises while it is down

    capture: Capture
    reads: Reads
    changes: Changes

    def quote(self, name: str) -> str:
        """A name as this database's SQL writes it, quoted whatever it holds."""
        return self.quote_mark + name.replace(self.quote_mark, self.quote_mark * 2) + self.quote_mark

    def qualified(self, table: TableName) -> str:
        """``namespace.table``, each part quoted."""
        return f"{self.quote(table.namespace)}.{self.quote(table.table)}"

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
