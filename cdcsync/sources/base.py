"""What a source kind reads of a source's config: ``SourceSettings`` (a ``SourceConfig`` is one) and its tables.

Protocols, so this package never imports the config models: the models ask it
for a kind's defaults instead.
"""

from __future__ import annotations

from typing import Protocol


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
