"""The databases cdcsync captures: one package per kind, each behind the contract of ``kind`` and its roles.

Everything that differs between databases (connecting, quoting names, the
catalog, reads of keys and values, snapshot and JDBC reads, range checksums,
pre-flight checks, the Debezium connector, its signals and the versions of its
events) is a method of a kind's roles; nothing outside this package asks
which database a source is. Adding a database is a package here beside
``postgres`` and ``mariadb``, a line in ``KINDS``, and its tests (the contract
suite, ``tests/unit/test_source_kinds.py`` and
``tests/integration/test_source_contract.py``, runs over every kind listed).
"""

from __future__ import annotations

from typing import Any

from cdcsync.sources.kind import SourceKind
from cdcsync.sources.mariadb import MariaDB
from cdcsync.sources.postgres import Postgres

KINDS: dict[str, SourceKind] = {kind.name: kind for kind in (Postgres(), MariaDB())}

# Kinds a config may name that cdcsync refuses, and why: MySQL's GTIDs are server_uuid:N (a change's version is
# built from MariaDB's domain-server-seq), and no MySQL server is tested on this stack.
NOT_YET = {
    "mysql": "kind mysql is not supported yet: cdcsync orders MySQL changes by no tested rule (its GTIDs are "
    "server_uuid:N) and every event would be dead-lettered; for a MariaDB server use kind: mariadb"
}

# Debezium's ``source.connector`` in an event -> the kind that reads it.
CONNECTORS: dict[str, SourceKind] = {connector: kind for kind in KINDS.values() for connector in kind.connectors}

# What connecting raises, whatever the kind, while the database is down or restarting (not a query's own error).
UNREACHABLE: tuple[type[BaseException], ...] = tuple(
    {error: None for kind in KINDS.values() for error in kind.unreachable}
)
# What a query raises, whatever the kind, for a literal the database cannot read as its column's type.
BAD_VALUE: tuple[type[BaseException], ...] = tuple({error: None for kind in KINDS.values() for error in kind.bad_value})


def kind_of(source: Any) -> SourceKind:
    """The kind of a source (anything with a ``kind`` name: a ``SourceConfig``), or of a kind's name."""
    return KINDS[source if isinstance(source, str) else source.kind]


def for_connector(connector: Any) -> SourceKind | None:
    """The kind whose Debezium connector writes events with this ``source.connector``, or None."""
    return CONNECTORS.get(connector) if isinstance(connector, str) else None
