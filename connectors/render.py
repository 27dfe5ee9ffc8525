"""Turn a source's config into the Debezium connector config Kafka Connect receives.

The defaults per kind are data in ``templates/<kind>.json``; ``${field}``
placeholders are filled from the source, and the source's ``debezium:`` map
overrides any key last. The result is plain ``str -> str``, the shape Connect
stores, so a re-apply can be compared key by key.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from string import Template

from cdcsync.config import Config, SourceConfig

CONNECTOR_CLASSES = {
    "postgres": "io.debezium.connector.postgresql.PostgresConnector",
    "mariadb": "io.debezium.connector.mariadb.MariaDbConnector",
}
SECRET_KEYS = re.compile(r"password|secret|token", re.IGNORECASE)


@cache
def template(kind: str) -> dict[str, str]:
    name = "postgres" if kind == "postgres" else "mariadb"
    raw = json.loads(resources.files("cdcsync.connectors").joinpath(f"templates/{name}.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def render(source: SourceConfig, config: Config) -> dict[str, str]:
    values = {
        "name": source.name,
        "host": source.host,
        "port": str(source.port),
        "user": source.user,
        "password": source.password.get_secret_value(),
        "database": source.database,
        "slot": source.slot or "",
        "publication": source.publication or "",
        "server_id": str(source.server_id or ""),
        "snapshot_mode": source.snapshot_mode,
        "heartbeat_interval_ms": str(source.heartbeat_interval_ms),
        # Debezium include lists are regular expressions: anchor and escape.
        "table_include_list": ",".join(re.escape(str(t)) for t in source.tables),
        "database_include_list": ",".join(sorted({re.escape(t.namespace) for t in source.tables})),
        "bootstrap_servers": config.kafka.bootstrap_servers,
        "schema_history_topic": source.schema_history_topic,
    }
    rendered = {k: Template(v).substitute(values) for k, v in template(source.kind).items()}
    rendered["connector.class"] = CONNECTOR_CLASSES[source.kind]
    rendered.update(source.debezium)
    return rendered


def redact(connector_config: dict[str, str]) -> dict[str, str]:
    return {k: ("********" if SECRET_KEYS.search(k) else v) for k, v in connector_config.items()}
