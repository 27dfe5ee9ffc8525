"""A kind's ``reads`` role: what the followers, verify, repair and the bootstrapper read from a database.

The catalog (columns, types, keys), rows read back by key, snapshot and JDBC
reads, and the SQL of range checksums.
"""

from __future__ import annotations

from abc import ABC


class Reads(ABC):  # noqa: B024 (a role: its methods are the reads each kind writes its own way)
    """What cdcsync reads from a source, and how its SQL says it."""
