"""The configuration: one YAML file, validated at start, with environment overrides.

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

Connection settings are overridden by environment variables, which win over the
file: ``CDCSYNC_KAFKA_BOOTSTRAP_SERVERS``, ``CDCSYNC_CONNECT_URL`` and
``CDCSYNC_SOURCE_<NAME>_{HOST,PORT,DATABASE,USER,PASSWORD}``. Nothing is read at
import time. Every problem is reported with its field path, where the value
came from and what would be valid (``ConfigError``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cdcsync.errors import ConfigError

ENV_PREFIX = "CDCSYNC_"
DEFAULT_CONFIG = "cdcsync.yaml"
SOURCE_ENV_FIELDS = ("host", "port", "database", "user", "password")
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,47}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Strict):
    bootstrap_servers: str = "127.0.0.1:19092"
    topic_replication_factor: int = Field(1, ge=1)


class ConnectSettings(_Strict):
    url: str = "http://127.0.0.1:18083"
    timeout_s: float = Field(15.0, gt=0)


class TableRef(_Strict):
    """A captured table: ``namespace`` is the Postgres schema or the MariaDB database."""

    namespace: str
    table: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.table}"


class SourceConfig(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="connector name and topic prefix")
    kind: Literal["postgres", "mariadb"]
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    database: str
    user: str
    password: SecretStr
    tables: list[TableRef] = Field(min_length=1)
    slot: str | None = Field(None, pattern=NAME_PATTERN, description="postgres replication slot")
    publication: str | None = Field(None, pattern=NAME_PATTERN, description="postgres publication")
    server_id: int | None = Field(None, ge=1, le=2**32 - 1, description="mariadb replica server id")
    topic_partitions: int = Field(1, ge=1)
    heartbeat_interval_ms: int = Field(5000, ge=100)
    compaction_horizon_s: int = Field(
        7 * 24 * 3600,
        ge=10,
        description="how long a change stays in its table topic before compaction may remove it (docs/compaction.md)",
    )
    snapshot_mode: str = "initial"
    debezium: dict[str, str] = Field(default_factory=dict, description="extra Debezium properties")

    @field_validator("kind", mode="before")
    @classmethod
    def _supported_kind(cls, value: Any) -> Any:
        # Refused here, before anything is registered: MySQL GTIDs are server_uuid:N (the version of a
        # change is built from MariaDB's domain-server-seq), and no MySQL server is tested on this stack.
        if value == "mysql":
            raise ValueError(
                "kind mysql is not supported yet: cdcsync orders MySQL changes by no tested rule (its GTIDs are "
                "server_uuid:N) and every event would be dead-lettered; for a MariaDB server use kind: mariadb"
            )
        return value

    @field_validator("tables", mode="before")
    @classmethod
    def _parse_tables(cls, value: Any, info: Any) -> Any:
        if not isinstance(value, list):
            return value
        default_ns = "public" if info.data.get("kind") == "postgres" else info.data.get("database")
        parsed = []
        for item in value:
            if isinstance(item, str):
                parts = item.split(".")
                if len(parts) == 1 and default_ns:
                    parts = [default_ns, parts[0]]
                if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", p) for p in parts):
                    raise ValueError(f"table {item!r} is not 'namespace.table' or 'table'")
                parsed.append({"namespace": parts[0], "table": parts[1]})
            else:
                parsed.append(item)
        return parsed

    @model_validator(mode="after")
    def _defaults_by_kind(self) -> SourceConfig:
        if self.kind == "postgres":
            object.__setattr__(self, "slot", self.slot or f"cdcsync_{self.name}")
            object.__setattr__(self, "publication", self.publication or f"cdcsync_{self.name}")
        elif self.server_id is None:
            # A stable id per source name, away from the ids real replicas use.
            object.__setattr__(self, "server_id", 5400 + sum(map(ord, self.name)) % 10000)
        return self

    def topic(self, table: TableRef) -> str:
        return f"{self.name}.{table.namespace}.{table.table}"

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.name}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.name}.transaction"

    @property
    def schema_history_topic(self) -> str:
        return f"_cdcsync_schema_history.{self.name}"


class TableMappingConfig(_Strict):
    target: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_.-]{0,200}$")
    include: list[str] | None = None
    rename: dict[str, str] = Field(default_factory=dict)
    types: dict[
        str,
        Literal[
            "decimal", "date", "time", "timestamp", "json", "bytes", "bool", "uuid", "int", "float", "text", "array"
        ],
    ] = Field(default_factory=dict)


class FollowerConfig(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    kind: Literal["elasticsearch", "redis", "delta"]
    url: str | None = Field(None, description="elasticsearch / redis URL")
    path: str | None = Field(None, description="delta: warehouse directory (default <state>/warehouse/<name>)")
    prefix: str = Field("cdc", description="redis key prefix / elasticsearch index prefix")
    soft_delete: bool = False
    history: bool = False
    tables: list[str] | None = Field(None, description="source.namespace.table to follow (default: all)")
    mappings: dict[str, TableMappingConfig] = Field(default_factory=dict, description="by namespace.table")
    checkpoint_dir: str | None = None
    dead_letter_topic: str | None = None
    max_offsets_per_trigger: int = Field(20000, ge=1)
    max_batch_bytes: int = Field(
        16 * 1024 * 1024, ge=1024 * 1024, description="a batch's records at most about this many bytes (sync/batching)"
    )
    sink_attempts: int = Field(
        8, ge=1, description="writes of a batch tried before it fails; the daemon then restarts the follower later"
    )
    trigger_interval_s: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _needs_location(self) -> FollowerConfig:
        if self.kind in ("elasticsearch", "redis") and not self.url:
            raise ValueError(f"follower {self.name}: kind {self.kind} needs url")
        return self

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"cdcsync.dlq.{self.name}"


class Config(_Strict):
    kafka: KafkaSettings = KafkaSettings()
    connect: ConnectSettings = ConnectSettings()
    sources: list[SourceConfig] = Field(default_factory=list)
    followers: list[FollowerConfig] = Field(default_factory=list)
    state_dir: str | None = Field(None, description="checkpoints and warehouse default under it")
    origin: dict[str, str] = Field(default_factory=dict, exclude=True, description="field path -> where it came from")

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        for what, names in (("source", [s.name for s in self.sources]), ("follower", [f.name for f in self.followers])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{what} names must be unique; repeated: {', '.join(dupes)}")
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

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain data, secrets masked: safe to print."""
        return self.model_dump(mode="json")  # SecretStr dumps as '**********'


def _apply_env(raw: dict[str, Any], env: Mapping[str, str], origin: dict[str, str]) -> None:
    for section, key in (("kafka", "bootstrap_servers"), ("connect", "url")):
        var = f"{ENV_PREFIX}{section.upper()}_{key.upper()}"
        if var in env:
            raw.setdefault(section, {})[key] = env[var]
            origin[f"{section}.{key}"] = f"environment variable {var}"
    for index, source in enumerate(raw.get("sources") or []):
        if not isinstance(source, dict) or not isinstance(source.get("name"), str):
            continue
        for key in SOURCE_ENV_FIELDS:
            var = f"{ENV_PREFIX}SOURCE_{source['name'].upper()}_{key.upper()}"
            if var in env:
                source[key] = env[var]
                origin[f"sources[{index}].{key}"] = f"environment variable {var}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read, override from the environment and validate; raise ``ConfigError`` listing every problem."""
    env = os.environ if env is None else env
    file = Path(path or env.get(f"{ENV_PREFIX}CONFIG") or DEFAULT_CONFIG)
    try:
        raw = yaml.safe_load(file.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError([f"config file {file} not found (pass --config or set {ENV_PREFIX}CONFIG)"]) from None
    except yaml.YAMLError as err:
        raise ConfigError([f"{file} is not valid YAML: {err}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{file}: the top level must be a mapping with kafka, connect and sources"])
    origin: dict[str, str] = {}
    _apply_env(raw, env, origin)
    try:
        return Config.model_validate({**raw, "origin": origin})
    except ValidationError as err:
        problems = []
        for e in err.errors():
            where = _path(e["loc"])
            source = origin.get(where, f"{file}")
            value = "" if e["type"] == "missing" or "password" in where else f" (got {_short(e['input'])})"
            problems.append(f"{where}: {e['msg']}{value} [from {source}]")
        raise ConfigError(problems) from None
