"""The configuration's shape and its validation: sources, followers, Kafka and Connect settings.

Shape (see ``cdcsync.yaml`` at the repository root for a working example)::

    kafka:   {bootstrap_servers: 127.0.0.1:19092}
    connect: {url: http://127.0.0.1:18083}
    sources:
      - name: pg_inventory          # connector name and topic prefix
        kind: postgres              # postgres | mariadb (mysql is refused, see SourceConfig)
        host: 127.0.0.1
        port: 15432
        database: inventory
        user: cdcsync
        password: cdcsync           # or CDCSYNC_SOURCE_PG_INVENTORY_PASSWORD
        tables: [public.customers]  # schema.table (postgres) or database.table

Read from a file, with environment overrides, by ``cdcsync.config.file.load_config``.

Secrets (docs/secrets.md): source passwords, follower passwords and API keys,
credentials written inside a follower URL (moved out of it into ``username``/
``password`` when the config is read, so ``url`` never holds them) and every
``debezium:``, ``kafka.properties`` or ``kafka.java_properties`` key that looks
secret (``SECRET_KEY``). ``Config.redacted()`` masks all of them; it is what is
printed, logged and shipped to Spark tasks (``sync.executors``). Kafka Connect
gets the connector's secrets through its ``FileConfigProvider``
(``connectors.render``), never in the connector config.

Nothing is read at import time. Every problem is reported with its field path,
where the value came from and what would be valid (``ConfigError``), never with
a secret's value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from cdcsync.config.base import MASK, PROPERTY_KEY, SECRET_KEY, Properties
from cdcsync.config.base import Strict as _Strict
from cdcsync.config.follower import FollowerConfig
from cdcsync.config.runtime import DeltaSettings, MetricsSettings, SparkSettings
from cdcsync.config.source import SourceConfig, TableRef
from cdcsync.errors import ConfigError
from cdcsync.names import default_target
from cdcsync.sources import kind_of

# librdkafka (2.5 on) pushes client metrics to a broker that asks for them (KIP-714), and closing a client then waits
# up to a second for its last push: 14 of 40 short-lived consumers took 1.0 s to close against the local broker, and
# every bootstrap, reindex, `cdcsync lag` and `status` closes a few. cdcsync's metrics are its own (/metrics), so its
# clients push none; `kafka.properties` can turn it back on (docs/performance.md, "Kafka clients: no metrics push").
CLIENT_DEFAULTS = {"enable.metrics.push": "false"}


class KafkaSettings(_Strict):
    """The Kafka cluster the table topics live in, and the settings of every client that reaches it."""

    bootstrap_servers: str = Field("127.0.0.1:19092", description="host:port[,host:port...] of the brokers")
    topic_replication_factor: int = Field(
        1, ge=1, description="replicas of each topic cdcsync creates (table topics, dead letters, Connect's)"
    )
    properties: Properties = Field(
        default_factory=dict,
        description="librdkafka properties for cdcsync's own clients (security.protocol, sasl.*, ssl.*)",
    )
    java_properties: Properties = Field(
        default_factory=dict,
        description="Java client properties: Spark's Kafka source (as kafka.<key>) and Debezium's schema history",
    )

    @field_validator("properties", "java_properties")
    @classmethod
    def _property_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(PROPERTY_KEY, key):
                raise ValueError(f"{key!r} is not a Kafka client property name (lower case, dotted)")
            if key == "bootstrap.servers":
                raise ValueError("set bootstrap.servers as kafka.bootstrap_servers")
        return value

    def client_config(self) -> dict[str, str]:
        """The settings of a confluent-kafka client: bootstrap servers, ``CLIENT_DEFAULTS``, then ``properties``."""
        return {"bootstrap.servers": self.bootstrap_servers, **CLIENT_DEFAULTS, **self.properties}


class ConnectSettings(_Strict):
    """The Kafka Connect worker that runs the Debezium connectors."""

    url: str = Field("http://127.0.0.1:18083", description="Kafka Connect's REST API")
    timeout_s: float = Field(15.0, gt=0, description="seconds a request to Kafka Connect may take")
    secrets_dir: str | None = Field(
        None,
        description="where `connectors apply` writes each connector's secrets for Connect's FileConfigProvider "
        "(default <state_dir>/connect-secrets); a directory the Connect worker's user owns",
    )
    secrets_dir_in_connect: str | None = Field(
        None, description="the same directory as the Connect worker sees it (a container mount); default secrets_dir"
    )


class Config(_Strict):
    """A deployment: the sources captured, the followers that keep stores in sync, and where Kafka is."""

    kafka: KafkaSettings = Field(KafkaSettings(), description="the Kafka cluster")
    connect: ConnectSettings = Field(ConnectSettings(), description="the Kafka Connect worker")
    spark: SparkSettings = Field(SparkSettings(), description="the Spark session the followers run in")
    delta: DeltaSettings = Field(DeltaSettings(), description="how the delta followers write their Delta tables")
    metrics: MetricsSettings = Field(MetricsSettings(), description="the daemon's /metrics and /healthz")
    sources: list[SourceConfig] = Field(default_factory=list, description="the databases captured")
    followers: list[FollowerConfig] = Field(default_factory=list, description="the stores kept in sync")
    state_dir: str | None = Field(
        None,
        description="checkpoints and the delta followers' default path under it (default: CDCSYNC_STATE_DIR, else "
        "the local stack's, docs/local-stack.md)",
    )
    origin: dict[str, str] = Field(default_factory=dict, exclude=True, description="field path -> where it came from")

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        for what, names in (("source", [s.name for s in self.sources]), ("follower", [f.name for f in self.followers])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{what} names must be unique; repeated: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _one_table_per_target(self) -> Config:
        # Two sources may both have public.customers: in one follower they must land in two targets, and the
        # advice must be one a user can follow (a namespace.table mapping would rename both). Other tables
        # sharing a target are refused when the follower starts (sync.catalog.mappings_for), as before.
        for follower in self.followers:
            if follower.documents is not None:  # it writes one target per document (its own rule)
                continue
            wanted = set(follower.tables) if follower.tables is not None else None
            seen: dict[str, str] = {}
            for source in self.sources:
                for table in source.tables:
                    name = f"{source.name}.{table}"
                    if wanted is not None and name not in wanted:
                        continue
                    override = follower.mapping_for(source.name, table)
                    target = override.target if override and override.target else default_target(table.table)
                    if target in seen and seen[target].endswith(f".{table}"):  # the same namespace.table
                        raise ValueError(
                            f"followers[{follower.name}]: {seen[target]} and {name} both map to target {target!r}; "
                            f"give one its own with mappings: {{'{name}': {{target: ...}}}} (a mapping keyed "
                            "source.namespace.table applies to that source's table alone)"
                        )
                    seen[target] = name
        return self

    @model_validator(mode="after")
    def _documents_captured(self) -> Config:
        for follower in self.followers:
            for name in follower.documents or {}:
                try:
                    self.document_tables(follower, name)
                except ConfigError as err:  # each names the path in the config and the fix
                    raise ValueError("; ".join(err.problems)) from None
        return self

    def document_source(self, follower: FollowerConfig, name: str) -> SourceConfig:
        """The source of every table of document ``name``: its ``source``, else the only one configured."""
        assert follower.documents is not None
        document, path = follower.documents[name], f"followers[{follower.name}].documents.{name}"
        if document.source is None:
            if len(self.sources) != 1:
                known = ", ".join(s.name for s in self.sources) or "none"
                raise ConfigError([f"{path}.source: name the source of its tables (configured: {known})"])
            return self.sources[0]
        for source in self.sources:
            if source.name == document.source:
                return source
        known = ", ".join(s.name for s in self.sources) or "none"
        raise ConfigError([f"{path}.source: no source named {document.source!r}; configured: {known}"])

    def document_tables(self, follower: FollowerConfig, name: str) -> list[tuple[str, TableRef]]:
        """Each table of document ``name`` as its path in the config and the source's table, root first.

        Every table must be one its source captures (``sources[].tables``): a document is followed
        through the topics of its tables, and only captured tables have one.
        """
        assert follower.documents is not None
        source = self.document_source(follower, name)
        captured = ", ".join(str(t) for t in source.tables) or "none"
        found: list[tuple[str, TableRef]] = []
        problems: list[str] = []

        def table(path: str, text: str) -> None:
            ref = captured_table(source, text)
            if ref is None:
                problems.append(
                    f"{path}: {text} is not a table source {source.name} captures; add it to "
                    f"sources[{source.name}].tables (captured: {captured})"
                )
            else:
                found.append((path, ref))

        def walk(path: str, node: Any) -> None:
            for field, child in node.children.items():
                here = f"{path}.children.{field}"
                table(f"{here}.table", child.table)
                if child.through is not None:
                    table(f"{here}.through.table", child.through.table)
                walk(here, child)

        root = f"followers[{follower.name}].documents.{name}"
        table(f"{root}.table", follower.documents[name].table)
        walk(root, follower.documents[name])
        if problems:
            raise ConfigError(problems)
        return found

    def follower(self, name: str) -> FollowerConfig:
        for follower in self.followers:
            if follower.name == name:
                return follower
        known = ", ".join(f.name for f in self.followers) or "none"
        raise ConfigError([f"followers: no follower named {name!r}; configured: {known}"])

    def followed_tables(self, follower: FollowerConfig) -> list[tuple[SourceConfig, TableRef]]:
        """The (source, table) pairs a follower applies, in config order (a document follower's: its documents')."""
        if follower.documents is not None:
            tables: dict[tuple[str, TableRef], SourceConfig] = {}
            for name in follower.documents:
                source = self.document_source(follower, name)
                for _, ref in self.document_tables(follower, name):
                    tables.setdefault((source.name, ref), source)
            return [(source, ref) for (_, ref), source in tables.items()]
        pairs = [(s, t) for s in self.sources for t in s.tables]
        if follower.tables is None:
            return pairs
        wanted = set(follower.tables)
        unknown = wanted - {f"{s.name}.{t}" for s, t in pairs}
        if unknown:
            raise ConfigError(
                [
                    f"followers[{follower.name}].tables: unknown {', '.join(sorted(unknown))}; "
                    "name them source.namespace.table"
                ]
            )
        return [(s, t) for s, t in pairs if f"{s.name}.{t}" in wanted]

    def source(self, name: str) -> SourceConfig:
        for source in self.sources:
            if source.name == name:
                return source
        raise ConfigError([f"sources: no source named {name!r}; configured: {', '.join(s.name for s in self.sources)}"])

    def secrets(self) -> dict[tuple[str | int, ...], str]:
        """Every secret of the config by its path in ``model_dump``: what ``redacted`` masks."""
        found: dict[tuple[str | int, ...], str] = {}
        for section, props in (("properties", self.kafka.properties), ("java_properties", self.kafka.java_properties)):
            found.update({("kafka", section, k): v for k, v in props.items() if SECRET_KEY.search(k)})
        found.update({("spark", "conf", k): v for k, v in self.spark.conf.items() if SECRET_KEY.search(k)})
        for i, source in enumerate(self.sources):
            found["sources", i, "password"] = source.password.get_secret_value()
            found.update({("sources", i, "debezium", k): v for k, v in source.debezium.items() if SECRET_KEY.search(k)})
        for i, follower in enumerate(self.followers):
            for key in ("password", "api_key"):
                secret = getattr(follower, key)
                if secret is not None:
                    found["followers", i, key] = secret.get_secret_value()
        return found

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain data, every secret masked: safe to print, log and ship to Spark tasks."""
        data = self.model_dump(mode="json")  # SecretStr dumps as '**********'
        for path in self.secrets():
            _put(data, path, MASK)
        return data

    @classmethod
    def with_secrets(cls, redacted: dict[str, Any], secrets: Mapping[tuple[str | int, ...], str]) -> Config:
        """The config ``redacted()`` came from, given its ``secrets()`` back (a Spark task rebuilding it)."""
        data = json_copy(redacted)
        for path, value in secrets.items():
            _put(data, path, value)
        return cls.model_validate(data)


def json_copy(data: dict[str, Any]) -> dict[str, Any]:
    import json

    copied: dict[str, Any] = json.loads(json.dumps(data))
    return copied


def captured_table(source: SourceConfig, text: str) -> TableRef | None:
    """The table of ``source.tables`` that ``text`` names (``namespace.table``, or ``table`` in the default
    namespace, as a document writes it), or None."""
    wanted = text if "." in text else f"{kind_of(source).default_namespace(source.database)}.{text}"
    return next((t for t in source.tables if str(t) == wanted), None)


def _put(data: Any, path: tuple[str | int, ...], value: str) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value
