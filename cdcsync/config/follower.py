"""A follower's config: the store it keeps in sync (``FollowerConfig``), its tables' mappings and its verify pass.

Part of the config's models (``cdcsync.config``), which holds and re-exports them.

Each kind of store has its class (``ElasticsearchFollowerConfig``, ``RedisFollowerConfig``,
``DeltaFollowerConfig``), which declares what differs by kind: its batches' defaults, the URL schemes
its server takes (none: a store with no server), which credentials go together, whether it takes index
settings and whether its store is tables at a path that Spark itself reads and writes. A follower's
entry is validated as its kind's class (``kind`` names it: ``FollowerConfig`` dispatches, whether
validated or constructed), so the rules of each kind are read from its class, never by asking which
kind a follower is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidatorFunctionWrapHandler, model_validator

from cdcsync.config.base import NAME_PATTERN
from cdcsync.config.base import Strict as _Strict
from cdcsync.config.document import DocumentConfig
from cdcsync.config.index import IndexSettings
from cdcsync.config.source import TableRef
from cdcsync.names import default_target

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
    path: str | None = Field(None, description="delta: its Delta tables' directory (default <state>/warehouse/<name>)")
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
        None, ge=1, description="a batch's records at most; default by kind (its class's default_batch_records)"
    )
    max_batch_bytes: int | None = Field(
        None,
        ge=1024 * 1024,
        description="a batch's records at most about this many bytes (sync/batching); default by kind (its "
        "class's default_batch_bytes)",
    )
    batch_deadline_s: float | None = Field(
        None,
        ge=1,
        description="seconds a batch may go without progress before it is cancelled and the follower restarted; "
        "default 120 plus a second per MiB of max_batch_bytes (sync/deadline)",
    )
    sink_attempts: int = Field(
        8, ge=1, description="writes of a batch tried before it fails; the daemon then restarts the follower later"
    )
    trigger_interval_s: float | None = Field(
        None,
        ge=0,
        description="seconds between batches; default by kind (its class's default_trigger_s, docs/performance.md)",
    )
    refresh_each_batch: bool = Field(
        True, description="elasticsearch: refresh the written indexes after each batch (false: refresh_interval)"
    )
    verify: VerifySettings = Field(VerifySettings(), description="the daemon's background verification")
    documents: dict[str, DocumentConfig] | None = Field(
        None,
        description="name -> a nested document per row of a root table, with its related tables "
        "(docs/documents.md); a follower keeps documents or tables, not both",
    )
    index: IndexSettings | None = Field(
        None, description="elasticsearch: the index settings of every table (a table's mappings.<table>.index wins)"
    )

    # What a kind declares, in its class below:
    default_trigger_s: ClassVar[float]  # seconds between batch starts, where trigger_interval_s is unset
    default_batch_records: ClassVar[int]  # a batch's records, where max_offsets_per_trigger is unset
    default_batch_bytes: ClassVar[int]  # a batch's bytes, where max_batch_bytes is unset
    url_schemes: ClassVar[tuple[str, ...]] = ()  # what its server's url may start with; none: it has no server
    takes_index: ClassVar[bool] = False  # it takes index settings (index, mappings.<table>.index)
    # Its store is tables under `path` that Spark itself reads and writes (Delta tables), so the session
    # reaches their file system (cdcsync.spark) and the daemon tends them (sync.delta_upkeep).
    spark_tables: ClassVar[bool] = False
    takes_documents: ClassVar[bool] = False  # it keeps nested documents of related tables (docs/documents.md)
    _kinds: ClassVar[dict[str, type[FollowerConfig]]] = {}  # kind -> its class, each class adding itself

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        (kind,) = get_args(cls.model_fields["kind"].annotation)  # a kind's class takes its kind alone
        FollowerConfig._kinds[kind] = cls

    @classmethod
    def _class_of(cls, value: Any) -> type[FollowerConfig] | None:
        """The class of the kind a follower's entry names, where ``cls`` is ``FollowerConfig`` itself."""
        kind = value.get("kind") if cls is FollowerConfig and isinstance(value, dict) else None
        return FollowerConfig._kinds.get(kind) if isinstance(kind, str) else None

    def __new__(cls, *args: Any, **data: Any) -> FollowerConfig:
        # FollowerConfig(kind=..., ...) builds its kind's class, as validating an entry does (_as_its_kind).
        return super().__new__(cls._class_of(data) or cls)

    @model_validator(mode="wrap")
    @classmethod
    def _as_its_kind(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Validate an entry as its kind's class, with that class's defaults and rules (an unknown kind: as is,
        which refuses it with the kinds there are)."""
        kind = cls._class_of(value)
        return kind.model_validate(value) if kind is not None else handler(value)

    @property
    def trigger_s(self) -> float:
        """Seconds between the starts of two batches: ``trigger_interval_s``, or its kind's default."""
        return self.trigger_interval_s if self.trigger_interval_s is not None else self.default_trigger_s

    @property
    def batch_records(self) -> int:
        """A batch's record limit: ``max_offsets_per_trigger``, or its kind's default."""
        return self.max_offsets_per_trigger if self.max_offsets_per_trigger is not None else self.default_batch_records

    @property
    def batch_bytes(self) -> int:
        """A batch's byte limit: ``max_batch_bytes``, or its kind's default."""
        return self.max_batch_bytes if self.max_batch_bytes is not None else self.default_batch_bytes

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
        if not self.url_schemes:  # a store with no server (Delta tables, at a path)
            given = [k for k in ("url", "username", "password", "api_key", "tls_ca") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"follower {self.name}: kind {self.kind} takes no {', '.join(given)}")
            return self
        if not self.url:
            raise ValueError(f"follower {self.name}: kind {self.kind} needs url")
        parts = urlsplit(self.url)
        if parts.scheme not in self.url_schemes:
            raise ValueError(
                f"url: scheme {parts.scheme or 'none'!r}; kind {self.kind} takes {', '.join(self.url_schemes)}"
            )
        try:
            parts.port  # noqa: B018  (parses the port, raising on a bad one)
        except ValueError:
            raise ValueError("url: its port is not a number from 1 to 65535") from None
        self._check_credentials()
        if self.tls_ca is not None:
            if parts.scheme not in ("https", "rediss"):
                raise ValueError(f"tls_ca: the url's scheme is {parts.scheme}; TLS needs https:// or rediss://")
            if not Path(self.tls_ca).is_file():
                raise ValueError(f"tls_ca: no file {self.tls_ca}")
        return self

    def _check_credentials(self) -> None:
        """Raise ``ValueError`` for credentials its server does not take (together); a kind's class says which."""

    @model_validator(mode="after")
    def _index_is_elasticsearchs(self) -> FollowerConfig:
        if self.takes_index:
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

    @model_validator(mode="after")
    def _documents_or_tables(self) -> FollowerConfig:
        if self.documents is None:
            return self
        if not self.takes_documents:
            kinds = sorted(k for k, c in FollowerConfig._kinds.items() if c.takes_documents)
            raise ValueError(
                f"follower {self.name}: documents: a {self.kind} follower keeps tables; {' and '.join(kinds)} "
                "followers keep documents (remove documents, or use one of those kinds)"
            )
        if not self.documents:
            raise ValueError(f"follower {self.name}: documents: name at least one, or remove the key")
        both = [k for k in ("tables", "mappings") if getattr(self, k)]
        if both:
            raise ValueError(
                f"follower {self.name}: {' and '.join(both)} with documents: a follower keeps documents or tables, "
                "not both; make a second follower for the tables"
            )
        bad = [name for name in self.documents if not re.match(NAME_PATTERN, name)]
        if bad:
            raise ValueError(f"follower {self.name}: documents: name(s) {bad} must match {NAME_PATTERN}")
        targets: dict[str, str] = {}
        for name, document in self.documents.items():
            target = document.target or name
            if target in targets:
                raise ValueError(
                    f"follower {self.name}: documents {targets[target]} and {name} both write {target!r}; set a "
                    "target for one of them"
                )
            targets[target] = name
        return self

    def document_target(self, name: str) -> str:
        """The index or key space of document ``name``: its ``target``, else its name."""
        assert self.documents is not None
        return self.documents[name].target or name

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


class ElasticsearchFollowerConfig(FollowerConfig):
    """A follower that keeps Elasticsearch indexes: a document per row."""

    kind: Literal["elasticsearch"] = Field(description="the store it keeps in sync")

    # Batches of ~500 changes take ~0.4 s at 1k changes/s, so a change waits ~0.25 s for its batch instead of
    # ~0.5 s (bench.freshness: docs/performance.md). Batches are applied by Spark's tasks as they read them
    # (sync/executors), Arrow batches of 8 MiB at a time whatever the batch's size; their limits only set how
    # often a catching-up follower pays a batch's fixed cost (~0.3 s: task launch, checkpoint writes, a refresh),
    # which at 30,000 changes per batch was a third of a catch-up's time.
    default_trigger_s = 0.5
    default_batch_records = 200_000
    default_batch_bytes = 64 * 1024 * 1024
    url_schemes = ("http", "https")
    takes_index = True
    takes_documents = True

    def _check_credentials(self) -> None:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password: elasticsearch basic auth takes both")
        if self.api_key is not None and self.password is not None:
            raise ValueError("api_key: set an API key or basic auth (username/password), not both")


class RedisFollowerConfig(FollowerConfig):
    """A follower that keeps a Redis key space: a hash per row."""

    kind: Literal["redis"] = Field(description="the store it keeps in sync")

    # As Elasticsearch's (ElasticsearchFollowerConfig): short batches for freshness, large limits for catch-up.
    default_trigger_s = 0.5
    default_batch_records = 200_000
    default_batch_bytes = 64 * 1024 * 1024
    url_schemes = ("redis", "rediss", "unix")
    takes_documents = True

    def _check_credentials(self) -> None:
        if self.api_key is not None:
            raise ValueError("api_key: only an elasticsearch follower takes an API key; redis uses username/password")


class DeltaFollowerConfig(FollowerConfig):
    """A follower that keeps Delta tables: one per source table, under ``path``."""

    kind: Literal["delta"] = Field(description="the store it keeps in sync")

    # A MERGE takes seconds, so its interval does not matter (bench.freshness: docs/performance.md). The batch is
    # collected on the driver for one MERGE, so its bytes are what the heap holds; a MERGE is mostly fixed cost
    # (2.3-2.6 s alone for 5,000 to 50,000 narrow rows), so a delta follower behind catches up faster in larger ones:
    # 64 MiB took a burst of 100k changes at 3,967/s against 2,968-3,064/s at 16 MiB (docs/performance.md,
    # "Batch size").
    default_trigger_s = 1.0
    default_batch_records = 100_000
    default_batch_bytes = 64 * 1024 * 1024
    spark_tables = True
