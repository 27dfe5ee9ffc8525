"""Pre-flight checks: is each source ready for Debezium, and is Kafka Connect?

Every check that fails says what is wrong and how to fix it, in the words an
operator would act on ("set wal_level = logical in postgresql.conf and
restart"). All checks run and all problems are reported together; nothing is
registered unless all pass.
"""

from __future__ import annotations

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.client import ConnectClient, ConnectUnreachable
from cdcsync.sources import kind_of
from cdcsync.sources.mariadb.capture import gtid_problems

__all__ = ["check_connect", "check_source", "gtid_problems", "run_preflight"]


def check_connect(client: ConnectClient, config: Config) -> list[str]:
    try:
        installed = set(client.plugins())
    except ConnectUnreachable as err:
        return [str(err)]
    problems = []
    for kind in sorted({s.kind for s in config.sources}):
        connector_class = kind_of(kind).capture.connector_class
        if connector_class not in installed:
            problems.append(
                f"Kafka Connect at {client.url} has no {connector_class} plugin; "
                "put the Debezium connector's jars in a directory on its plugin.path and restart it"
            )
    return problems


def check_source(source: SourceConfig, new: bool = True) -> list[str]:
    """The server settings, grants and tables capture needs; ``new``: the connector is yet to be made."""
    return kind_of(source).capture.preflight(source, new)


def run_preflight(config: Config, client: ConnectClient, sources: list[SourceConfig]) -> list[str]:
    problems = check_connect(client, config)
    reachable = not problems
    for source in sources:  # kind mysql is refused when the config loads
        # Before its first snapshot, which reads every table's DDL (MariaDB).
        problems.extend(check_source(source, new=not reachable or client.get_config(source.name) is None))
    return problems
