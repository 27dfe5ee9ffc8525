"""A kind's ``capture`` role: what ``cdcsync.connectors`` needs to know of a database.

The Debezium connector that reads it and its config, the objects capture owns
on the server (a Postgres slot and publication), how signals are written, and
the checks run before a connector is registered.
"""

from __future__ import annotations

from abc import ABC
from typing import ClassVar


class Capture(ABC):
    """What ``cdcsync.connectors`` asks a kind."""

    connector_class: ClassVar[str]  # the Debezium connector's class in Kafka Connect
    template: ClassVar[str]  # its config template, connectors/templates/<template>.json
