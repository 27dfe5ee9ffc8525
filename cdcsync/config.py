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

Read from a file, with environment overrides, by ``cdcsync.config_file.load_config``.

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
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from cdcsync.config_base import MASK, NAME_PATTERN, PROPERTY_KEY, SECRET_KEY, Properties
from cdcsync.config_base import Strict as _Strict
from cdcsync.config_index import IndexSettings
from cdcsync.config_runtime import DeltaSettings, MetricsSettings, SparkSettings
from cdcsync.config_source import SourceConfig, TableRef
from cdcsync.errors import ConfigError
from cdcsync.names import default_target

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


# A column's type in a mapping (sync/mapping.py says how each is converted); mappings[].types may set any.
MappingType = Literal[
    "decimal",
    "date",
    "time",
    "timestamp",
    "json",
    "bytes",
    "bool",
    "uuid",
    "int",
    "float",
    "text",
    "array",
    "point",
    "geometry",
    "interval",
    "duration",
    "pg_text",
    "geometric",
    "bits",
]


class TableMappingConfig(_Strict):
    """How one table's rows become a follower's documents or rows (docs/types.md)."""

    target: str | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,200}$",
        description="the index, key space or table name in the store; default from the table's name",
    )
    include: list[str] | None = Field(None, description="the columns to keep (default: every column)")
    rename: dict[str, str] = Field(default_factory=dict, description="column -> its field name in the store")
    types: dict[str, MappingType] = Field(
        default_factory=dict, description="column -> its type, where the one read from the source is not wanted"
    )
    index: IndexSettings | None = Field(
        None, description="elasticsearch: this table's index settings, key by key over the follower's `index`"
    )


# Seconds between batch starts by sink kind (a batch that takes longer is followed at once). Search and cache
# batches of ~500 changes take ~0.4 s at 1k changes/s, so a change waits ~0.25 s for its batch instead of ~0.5 s;
# a warehouse MERGE takes seconds, so its interval does not matter (bench.freshness: docs/performance.md).
TRIGGER_INTERVAL_S = {"elasticsearch": 0.5, "redis": 0.5, "delta": 1.0}
# A batch's limits by sink kind: records, and bytes of records (sync/batching). The warehouse collects its batch
# on the driver for one MERGE, so its bytes are what the heap holds; a MERGE is mostly fixed cost (2.3-2.6 s
# alone for 5,000 to 50,000 narrow rows), so a warehouse behind catches up faster in larger ones: 64 MiB took a
# burst of 100k changes at 3,967/s against 2,968-3,064/s at 16 MiB (docs/performance.md, "Batch size").
# Search and cache batches are applied by Spark's tasks as they read them (sync/executors), Arrow batches of
# 8 MiB at a time whatever the batch's size; their limits only set how often a catching-up follower pays a
# batch's fixed cost (~0.3 s: task launch, checkpoint writes, a refresh), which at 30,000 changes per batch was
# a third of a catch-up's time.
BATCH_RECORDS = {"elasticsearch": 200_000, "redis": 200_000, "delta": 100_000}
BATCH_BYTES = {"elasticsearch": 64 * 1024 * 1024, "redis": 64 * 1024 * 1024, "delta": 64 * 1024 * 1024}


class VerifySettings(_Strict):
    """The daemon's background verification of a follower (docs/followers.md, "Background verification")."""

    enabled: bool = Field(True, description="compare each table with its source in the background, paced")
    rows_per_s: int = Field(800, ge=1, description="rows read per second on each side: the pace of a pass")
    period_s: float = Field(3600, ge=10, description="a table's passes start at most this often")
    auto_repair: bool = Field(False, description="repair what a pass found (as `cdcsync repair`), through the log")


class FollowerConfig(_Strict):
    """A derived store kept in sync with the sources' tables, in their commit order."""

    name: str = Field(pattern=NAME_PATTERN, description="the follower's name: in commands, metrics and state paths")
    kind: Literal["elasticsearch", "redis", "delta"] = Field(description="the store it keeps in sync")
    url: str | None = Field(None, description="elasticsearch / redis URL")
    path: str | None = Field(None, description="delta: warehouse directory (default <state>/warehouse/<name>)")
    prefix: str = Field("cdc", description="redis key prefix / elasticsearch index prefix")
    soft_delete: bool = Field(False, description="a deleted row keeps its last data beside its delete marker")
    history: bool = Field(False, description="delta: also keep every change in <target>__history")
    tables: list[str] | None = Field(None, description="source.namespace.table to follow (default: all)")
    mappings: dict[str, TableMappingConfig] = Field(
        default_factory=dict,
        description="by namespace.table, or source.namespace.table for one source's table (that one wins)",
    )
    username: str | None = Field(None, description="elasticsearch basic auth / redis ACL user")
    password: SecretStr | None = Field(None, description="elasticsearch basic auth / redis password")
    api_key: SecretStr | None = Field(None, description="elasticsearch API key (the encoded form, or id:key)")
    tls_ca: str | None = Field(None, description="CA bundle (PEM file) that signs the https:// or rediss:// server")
    checkpoint_dir: str | None = Field(None, description="the stream's checkpoint (default under state_dir)")
    dead_letter_topic: str | None = Field(None, description="where records that cannot be applied go, with the "
                                          "reason (default cdcsync.dlq.<name>)")  # fmt: skip
    max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="a batch's records at most; default by kind (BATCH_RECORDS)"
    )
    max_batch_bytes: int | None = Field(
        None,
        ge=1024 * 1024,
        description="a batch's records at most about this many bytes (sync/batching); default by kind (BATCH_BYTES)",
    )
    sink_attempts: int = Field(
        8, ge=1, description="writes of a batch tried before it fails; the daemon then restarts the follower later"
    )
    trigger_interval_s: float | None = Field(
        None, ge=0, description="seconds between batches; default by kind (TRIGGER_INTERVAL_S, docs/performance.md)"
    )
    refresh_each_batch: bool = Field(
        True, description="elasticsearch: refresh the written indexes after each batch (false: refresh_interval)"
    )
    verify: VerifySettings = Field(VerifySettings(), description="the daemon's background verification")
    index: IndexSettings | None = Field(
        None, description="elasticsearch: the index settings of every table (a table's mappings.<table>.index wins)"
    )

    @property
    def trigger_s(self) -> float:
        """Seconds between the starts of two batches: ``trigger_interval_s``, or its kind's default."""
        return self.trigger_interval_s if self.trigger_interval_s is not None else TRIGGER_INTERVAL_S[self.kind]

    @property
    def batch_records(self) -> int:
        """A batch's record limit: ``max_offsets_per_trigger``, or its kind's default."""
        return self.max_offsets_per_trigger if self.max_offsets_per_trigger is not None else BATCH_RECORDS[self.kind]

    @property
    def batch_bytes(self) -> int:
        """A batch's byte limit: ``max_batch_bytes``, or its kind's default."""
        return self.max_batch_bytes if self.max_batch_bytes is not None else BATCH_BYTES[self.kind]

    @model_validator(mode="before")
    @classmethod
    def _credentials_out_of_url(cls, value: Any) -> Any:
        """Move ``user:password@`` out of the URL into ``username``/``password``: ``url`` never holds a secret."""
        if not isinstance(value, dict) or not isinstance(value.get("url"), str):
            return value
        parts = urlsplit(value["url"])
        if "password" in parse_qs(parts.query):
            raise ValueError("url: put the password in password (or CDCSYNC_FOLLOWER_<NAME>_PASSWORD), not the query")
        if "@" not in parts.netloc:
            return value
        userinfo, _, host = parts.netloc.rpartition("@")
        user, has_password, password = userinfo.partition(":")
        moved = {"url": urlunsplit(parts._replace(netloc=host))}
        if user:
            moved["username"] = unquote(user)
        if has_password:
            moved["password"] = unquote(password)
        both = sorted(k for k in moved if k != "url" and value.get(k) is not None)
        if both:
            raise ValueError(f"url: its {' and '.join(both)} is also set on its own; keep one")
        return {**value, **moved}

    @model_validator(mode="after")
    def _needs_location(self) -> FollowerConfig:
        if self.kind in ("elasticsearch", "redis") and not self.url:
            raise ValueError(f"follower {self.name}: kind {self.kind} needs url")
        if self.kind == "delta":
            given = [k for k in ("url", "username", "password", "api_key", "tls_ca") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"follower {self.name}: kind delta takes no {', '.join(given)}")
            return self
        parts = urlsplit(self.url or "")
        schemes = {"elasticsearch": ("http", "https"), "redis": ("redis", "rediss", "unix")}[self.kind]
        if parts.scheme not in schemes:
            raise ValueError(f"url: scheme {parts.scheme or 'none'!r}; kind {self.kind} takes {', '.join(schemes)}")
        try:
            parts.port  # noqa: B018  (parses the port, raising on a bad one)
        except ValueError:
            raise ValueError("url: its port is not a number from 1 to 65535") from None
        if self.kind == "redis" and self.api_key is not None:
            raise ValueError("api_key: only an elasticsearch follower takes an API key; redis uses username/password")
        if self.kind == "elasticsearch" and (self.username is None) != (self.password is None):
            raise ValueError("username and password: elasticsearch basic auth takes both")
        if self.kind == "elasticsearch" and self.api_key is not None and self.password is not None:
            raise ValueError("api_key: set an API key or basic auth (username/password), not both")
        if self.tls_ca is not None:
            if parts.scheme not in ("https", "rediss"):
                raise ValueError(f"tls_ca: the url's scheme is {parts.scheme}; TLS needs https:// or rediss://")
            if not Path(self.tls_ca).is_file():
                raise ValueError(f"tls_ca: no file {self.tls_ca}")
        return self

    @model_validator(mode="after")
    def _index_is_elasticsearchs(self) -> FollowerConfig:
        if self.kind == "elasticsearch":
            return self
        given = (["index"] if self.index is not None else []) + [
            f"mappings.'{table}'.index" for table, mapping in self.mappings.items() if mapping.index is not None
        ]
        if given:
            raise ValueError(
                f"follower {self.name}: {', '.join(given)}: index settings are for kind elasticsearch; a {self.kind} "
                "follower takes none (remove them)"
            )
        return self

    def mapping_for(self, source: str, table: TableRef) -> TableMappingConfig | None:
        """The mapping a source's table takes: keyed by ``source.namespace.table``, else by ``namespace.table``."""
        return self.mappings.get(f"{source}.{table}") or self.mappings.get(str(table))

    def target_for(self, source: str, table: TableRef) -> str:
        """The store's name for a source's table: its mapping's ``target``, else one made from the table's name."""
        mapping = self.mapping_for(source, table)
        return mapping.target if mapping and mapping.target else default_target(table.table)

    def index_for(self, source: str, table: TableRef) -> IndexSettings:
        """The index settings a source's table takes (elasticsearch): the follower's, with its mapping's over them."""
        mapping = self.mapping_for(source, table)
        return (self.index or IndexSettings()).under(mapping.index if mapping else None)

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"cdcsync.dlq.{self.name}"


class Config(_Strict):
    """A deployment: the sources captured, the followers that keep stores in sync, and where Kafka is."""

    kafka: KafkaSettings = Field(KafkaSettings(), description="the Kafka cluster")
    connect: ConnectSettings = Field(ConnectSettings(), description="the Kafka Connect worker")
    spark: SparkSettings = Field(SparkSettings(), description="the Spark session the followers run in")
    delta: DeltaSettings = Field(DeltaSettings(), description="the warehouse's Delta tables")
    metrics: MetricsSettings = Field(MetricsSettings(), description="the daemon's /metrics and /healthz")
    sources: list[SourceConfig] = Field(default_factory=list, description="the databases captured")
    followers: list[FollowerConfig] = Field(default_factory=list, description="the stores kept in sync")
    state_dir: str | None = Field(
        None,
        description="checkpoints and warehouse default under it (default: CDCSYNC_STATE_DIR, else the local "
        "stack's, docs/local-stack.md)",
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

    def follower(self, name: str) -> FollowerConfig:
        for follower in self.followers:
            if follower.name == name:
                return follower
        known = ", ".join(f.name for f in self.followers) or "none"
        raise ConfigError([f"followers: no follower named {name!r}; configured: {known}"])

    def followed_tables(self, follower: FollowerConfig) -> list[tuple[SourceConfig, TableRef]]:
        """The (source, table) pairs a follower applies, in config order."""
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


def _put(data: Any, path: tuple[str | int, ...], value: str) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value
