"""A source's config: the database captured and its tables (``SourceConfig``), and a table's name (``TableRef``).

Part of the config's models (``cdcsync.config``), which holds and re-exports them.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from cdcsync.config.base import NAME_PATTERN, Properties
from cdcsync.config.base import Strict as _Strict
from cdcsync.names import topic_name
from cdcsync.sources import KINDS, NOT_YET, kind_of


class TableRef(_Strict):
    """A captured table: ``namespace`` is the Postgres schema or the MariaDB database.

    Any name the database accepts (spaces, dots, unicode, reserved words, mixed case): the short form
    ``namespace.table`` in a config is for plain names; others are written ``{namespace: ..., table: ...}``.
    """

    namespace: str = Field(min_length=1, description="the Postgres schema or the MariaDB database")
    table: str = Field(min_length=1, description="the table's name, as the database spells it")

    def __str__(self) -> str:
        return f"{self.namespace}.{self.table}"


class SourceConfig(_Strict):
    """A database captured by one Debezium connector into one compacted topic per table."""

    name: str = Field(pattern=NAME_PATTERN, description="connector name and topic prefix")
    kind: str = Field(
        description="the database: Postgres, or MariaDB (MySQL is refused)", json_schema_extra={"enum": list(KINDS)}
    )
    host: str = Field("127.0.0.1", description="the database server's host, as cdcsync and Kafka Connect reach it")
    port: int = Field(ge=1, le=65535, description="its port")
    database: str = Field(description="the database to connect to (postgres: the one whose tables are captured)")
    user: str = Field(description="a user with replication rights (docs/capture.md)")
    password: SecretStr = Field(description="secret: never printed; or CDCSYNC_SOURCE_<NAME>_PASSWORD")
    tables: list[TableRef] = Field(
        default_factory=list,
        description="tables to capture: `namespace.table`, `table` (postgres: schema public; mariadb: `database`), "
        "or {namespace: ..., table: ...} for a name with spaces, dots or other characters",
    )
    schemas: list[str] = Field(
        default_factory=list,
        description="capture every table of these schemas (postgres) or databases (mariadb), those created later "
        "too (connectors/discover.py)",
    )
    include: list[str] = Field(
        default_factory=list,
        description="regular expressions: capture every table whose `namespace.table` one matches in full, those "
        "created later too",
    )
    exclude: list[str] = Field(
        default_factory=list, description="regular expressions: tables `schemas` or `include` would match but not to"
    )
    signal_namespace: str | None = Field(
        None,
        description="the schema or database of the source's signal table (default: the first table's; with "
        "patterns alone, the first of `schemas`, else public / `database`)",
    )
    slot: str | None = Field(None, pattern=NAME_PATTERN, description="postgres replication slot")
    publication: str | None = Field(None, pattern=NAME_PATTERN, description="postgres publication")
    server_id: int | None = Field(None, ge=1, le=2**32 - 1, description="mariadb replica server id")
    topic_partitions: int = Field(
        1,
        ge=1,
        description="partitions of each table topic cdcsync creates: keys hash to them, each key's changes stay in "
        "order in one, and followers read them in parallel (docs/capture.md); set before the first apply",
    )
    heartbeat_interval_ms: int = Field(
        5000, ge=100, description="Debezium's heartbeat: how often capture shows it is alive when no table changes"
    )
    compaction_horizon_s: int = Field(
        7 * 24 * 3600,
        ge=10,
        description="how long a change stays in its table topic before compaction may remove it (docs/compaction.md)",
    )
    snapshot_mode: str = Field(
        "initial", description="Debezium's snapshot.mode: initial (the tables' rows first), no_data, when_needed, ..."
    )
    set_replica_identity: bool = Field(
        True,
        description="postgres: connectors apply sets REPLICA IDENTITY FULL on captured tables (and their partitions) "
        "that could send an unchanged large value as Debezium's placeholder; false: apply refuses them and names "
        "the ALTER TABLE to run (connectors/source_setup.py)",
    )
    debezium: Properties = Field(default_factory=dict, description="extra Debezium properties")

    @field_validator("kind", mode="before")
    @classmethod
    def _supported_kind(cls, value: Any) -> Any:
        # Refused here, before anything is registered (cdcsync.sources says why a kind is not one yet).
        if value in NOT_YET:
            raise ValueError(NOT_YET[value])
        if value not in KINDS:
            *others, last = (repr(kind) for kind in KINDS)
            raise PydanticCustomError("literal_error", f"Input should be {', '.join(others)} or {last}")
        return value

    @field_validator("tables", mode="before")
    @classmethod
    def _parse_tables(cls, value: Any, info: Any) -> Any:
        if not isinstance(value, list):
            return value
        kind = info.data.get("kind")
        database = info.data.get("database")
        default_ns = kind_of(kind).default_namespace(database) if kind in KINDS and database else database
        parsed = []
        for item in value:
            if isinstance(item, str):
                parts = item.split(".")
                if len(parts) == 1 and default_ns:
                    parts = [default_ns, parts[0]]
                if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", p) for p in parts):
                    raise ValueError(
                        f"table {item!r} is not 'namespace.table' or 'table' of plain names; write a name with "
                        "spaces, dots or other characters as {namespace: ..., table: ...}"
                    )
                parsed.append({"namespace": parts[0], "table": parts[1]})
            else:
                parsed.append(item)
        return parsed

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{pattern!r} is not a regular expression: {err}") from None
        return value

    @model_validator(mode="after")
    def _some_tables(self) -> SourceConfig:
        if not (self.tables or self.schemas or self.include):
            raise ValueError("name the tables to capture: tables, schemas or include (one at least)")
        if self.signal_namespace is None:
            default = self.schemas[0] if self.schemas else kind_of(self).default_namespace(self.database)
            object.__setattr__(self, "signal_namespace", self.tables[0].namespace if self.tables else default)
        return self

    @property
    def patterns(self) -> bool:
        """Whether tables are also found by name in the database (``schemas``, ``include``): connectors.discover."""
        return bool(self.schemas or self.include)

    @model_validator(mode="after")
    def _defaults_by_kind(self) -> SourceConfig:
        for setting, value in kind_of(self).settings_defaults(self).items():
            object.__setattr__(self, setting, value)
        return self

    @model_validator(mode="after")
    def _one_topic_per_table(self) -> SourceConfig:
        # Debezium writes characters Kafka refuses as '_': two such tables would share one topic.
        seen: dict[str, TableRef] = {}
        for table in self.tables:
            topic = self.topic(table)
            if topic in seen and seen[topic] != table:
                raise ValueError(
                    f"tables {str(seen[topic])!r} and {str(table)!r} would both be captured into topic {topic!r} "
                    "(Debezium writes each character a Kafka topic name may not hold as '_'); capture one of them "
                    "in a source of its own"
                )
            seen[topic] = table
        return self

    def topic(self, table: TableRef) -> str:
        return topic_name(self.name, table.namespace, table.table)

    @property
    def signal_table(self) -> TableRef:
        """Where capture takes signals (incremental snapshots of tables added later; connectors.signals).

        One per source: a Postgres publication may only hold tables its user
        owns, and each connector reads only its own signals and watermarks.
        """
        return TableRef(namespace=str(self.signal_namespace), table=f"cdcsync_signal_{self.name}"[:63])

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.name}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.name}.transaction"

    @property
    def schema_history_topic(self) -> str:
        return f"_cdcsync_schema_history.{self.name}"
