"""A kind's ``capture`` role: what ``cdcsync.connectors`` needs to know of a database.

The Debezium connector that reads it and its config, the objects capture owns
on the server (a Postgres slot and publication), how signals are written, and
the checks run before a connector is registered.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from cdcsync.sources.base import SourceSettings, TableName

Leaves = dict[str, dict[str, str]]  # table -> {oid: "schema.name"} of its leaf partitions (connectors.partitions)


class CapturedSource(SourceSettings, Protocol):
    """What capture reads of a source's config besides what every role does (``SourceSettings``)."""

    @property
    def tables(self) -> Sequence[TableName]: ...

    @property
    def signal_table(self) -> TableName: ...

    @property
    def debezium(self) -> Mapping[str, str]: ...

    @property
    def set_replica_identity(self) -> bool: ...


@dataclass
class SourceSetup:
    """What a source lacks for capture (``connectors.source_setup``): problems, and statements that fix the rest."""

    problems: list[str] = field(default_factory=list)
    statements: list[tuple[str, str]] = field(default_factory=list)  # (SQL, what it changes, for the operator)


class Capture(ABC):
    """What ``cdcsync.connectors`` asks a kind."""

    connector_class: ClassVar[str]  # the Debezium connector's class in Kafka Connect
    template: ClassVar[str]  # its config template, connectors/templates/<template>.json
    schema_history: ClassVar[bool]  # its connector keeps the DDL it read in a schema-history topic
    driver_errors: ClassVar[tuple[type[BaseException], ...]]  # what its driver raises, for a query or a connection

    @abstractmethod
    def capturable(self, source: CapturedSource) -> list[tuple[Any, Any]]:
        """The ``(namespace, table)`` of each table of the source's database that capture could take."""

    @abstractmethod
    def preflight(self, source: CapturedSource, new: bool) -> list[str]:
        """What the server lacks for capture, each with its fix; ``new``: the connector is yet to be made."""

    @abstractmethod
    def setup(self, source: CapturedSource) -> SourceSetup:
        """What ``connectors apply`` would change in the source for capture to see every value (no writes)."""

    @abstractmethod
    def carry_out(self, source: CapturedSource, setup: SourceSetup) -> list[str]:
        """Run a setup's statements (there is one at least); returns what each changed."""

    @abstractmethod
    def leaves(self, source: CapturedSource) -> Leaves | None:
        """The captured tables' leaf partitions now; None when every partition's rows pass through the log."""

    @abstractmethod
    def slot(self, source: CapturedSource) -> str | None:
        """The replication slot capture reads through, which holds the log back for it; None: no slot."""

    @abstractmethod
    def retained_wal(self, source: CapturedSource) -> int | None:
        """Bytes of log the source's slot keeps from being recycled; None when the slot does not exist."""

    @abstractmethod
    def end_slot_backend(self, source: CapturedSource) -> int | None:
        """End the backend holding the source's replication slot, if one does; its pid."""

    @abstractmethod
    def probe(self, source: CapturedSource) -> None:
        """Connect to the source's server and close again; raises what the kind's ``unreachable`` names if down."""

    @abstractmethod
    def held(self, source: CapturedSource) -> list[str]:
        """What capture keeps on the server besides the signal table until it is removed, worst first."""

    @abstractmethod
    def held_in(self, connector_config: Mapping[str, str]) -> list[str]:
        """``held`` as far as a connector's own config tells it (its source unknown)."""

    @abstractmethod
    def rebuilt(self, connector_config: Mapping[str, str], signal_namespace: str) -> dict[str, Any]:
        """The source's settings a connector's config gives back beyond its host, port, user and tables."""

    @abstractmethod
    def resumes_stale_offsets(self, source: CapturedSource) -> bool:
        """Whether a connector created now may resume from offsets a deleted one left under its name."""

    @abstractmethod
    def log_position(self, source: CapturedSource) -> Any:
        """The database's log position now, as ``went_back`` compares it with a connector's offset."""

    @abstractmethod
    def went_back(self, committed: dict[str, Any], current: Any) -> str | None:
        """What shows the log went back behind ``committed`` (a connector's offset), or None (pure)."""

    @abstractmethod
    def remove(self, source: CapturedSource) -> list[str]:
        """Drop what capture made in the database, the signal table included; one line per object."""

    @abstractmethod
    def drop_sql(self, source: CapturedSource) -> str:
        """The SQL that drops by hand what ``remove`` drops."""

    @abstractmethod
    def unknown_schemas(
        self, source: CapturedSource, current: Mapping[str, str], added: Sequence[TableName]
    ) -> list[str]:
        """Why the running connector (``current``) could not take ``added`` tables without being made anew."""

    @abstractmethod
    def signal_table_usable(self, source: CapturedSource) -> bool | None:
        """None when the signal table is missing; else whether the source's user may use it."""
