"""A follower's Elasticsearch index settings (``index:``): shards, replicas, settings and field mappings.

Part of the config's models (``cdcsync.config``); docs/followers.md, "Index settings".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, JsonValue, field_validator

from cdcsync.config.base import Strict as _Strict

# The fields of an Elasticsearch document that cdcsync writes itself (sync/sinks/elasticsearch_fields.py): the version,
# and a delete marker's flag and time. Its readers, its apply rule and the marker purge rely on them as they are.
INDEX_OWN_FIELDS = ("cdcsync_version", "cdcsync_deleted", "cdcsync_deleted_at", "cdcsync_key")
# Index settings that have a key of their own in `index:`: one place each, so a change is seen and applied.
INDEX_COUNTS = {"index.number_of_shards": "shards", "index.number_of_replicas": "replicas"}


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Index settings as Elasticsearch lists them flat: ``{analysis: {analyzer: ...}}`` -> ``index.analysis...``.

    Nested, dotted, with or without the leading ``index.``: the forms the create-index API takes, made one.
    """
    found: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found.update(flat_settings(value, f"{name}."))
        else:
            found[name] = value
    return found if prefix else {k if k.startswith("index.") else f"index.{k}": v for k, v in found.items()}


class IndexMappings(_Strict):
    """Elasticsearch field mappings of a follower's indexes, over those cdcsync derives from the columns' types."""

    properties: dict[str, dict[str, JsonValue]] = Field(
        default_factory=dict,
        description="field -> its Elasticsearch mapping (`{type: text, analyzer: folded}`), instead of the one "
        "cdcsync derives from the column's type. A new field is added to a live index in place; a changed one "
        "(type, analyzer) is reported and takes `cdcsync reindex`. cdcsync_version, cdcsync_deleted, "
        "cdcsync_deleted_at and cdcsync_key are cdcsync's own and refused",
    )

    @field_validator("properties")
    @classmethod
    def _not_cdcsyncs_own(cls, value: dict[str, dict[str, JsonValue]]) -> dict[str, dict[str, JsonValue]]:
        own = sorted(name for name in value if name.split(".")[0] in INDEX_OWN_FIELDS)
        if own:
            raise ValueError(
                f"{', '.join(own)}: cdcsync writes {', '.join(INDEX_OWN_FIELDS)} itself (the version every write "
                "is compared with, and a delete marker's flag and time); map other fields, or rename a column "
                "that has one of these names (mappings.<table>.rename)"
            )
        untyped = sorted(name for name, mapping in value.items() if not mapping)
        if untyped:
            raise ValueError(f"{', '.join(untyped)}: an empty mapping; give at least its type ({{type: keyword}})")
        return value


class IndexSettings(_Strict):
    """Elasticsearch: how a follower's indexes are made (docs/followers.md, "Index settings").

    Set on the follower for all its tables, and in a table's mapping for that table alone (key by key over the
    follower's). Applied whenever an index is created: the live one, and the one a bootstrap or reindex builds.
    At a follower's start, what a live index can take in place (replicas, dynamic settings such as
    refresh_interval, new fields) is applied to it; what it cannot (shards, analysis, a field's changed mapping)
    is reported with the reindex that applies it.
    """

    shards: int | None = Field(
        None, ge=1, le=1024, description="primary shards of a new index (null: 1); an index keeps its count for life"
    )
    replicas: int | None = Field(
        None, ge=0, description="replicas of each shard (null: 0 for a new index, a live index's own left as is)"
    )
    settings: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="other index settings, nested or dotted as Elasticsearch's create-index API takes them "
        "(analysis, refresh_interval, max_result_window...); not the shard and replica counts",
    )
    mappings: IndexMappings = Field(IndexMappings(), description="field mappings")

    @field_validator("settings")
    @classmethod
    def _counts_apart(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        for key in flat_settings(value):
            if key in INDEX_COUNTS:
                raise ValueError(f"{key}: set it as index.{INDEX_COUNTS[key]}, not among the free-form settings")
        return value

    def flat(self) -> dict[str, Any]:
        """``settings`` as Elasticsearch lists them flat (``flat_settings``)."""
        return flat_settings(self.settings)

    def under(self, table: IndexSettings | None) -> IndexSettings:
        """These settings with a table's own over them, key by key (a setting, a field)."""
        if table is None:
            return self
        return IndexSettings(
            shards=table.shards if table.shards is not None else self.shards,
            replicas=table.replicas if table.replicas is not None else self.replicas,
            settings={**self.flat(), **table.flat()},
            mappings=IndexMappings(properties={**self.mappings.properties, **table.mappings.properties}),
        )
