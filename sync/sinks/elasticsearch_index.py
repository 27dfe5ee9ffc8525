"""The Elasticsearch sink's index settings: what an index is created with, and what a live one is brought to.

A target's settings are its follower's ``index:`` with its table mapping's ``index:`` over them, key by key
(``cdcsync.config.IndexSettings``): ``IndexSpecs`` holds them by target. Every index is created with them
(``IndexSpec.create_settings``): the live one ``open`` makes, and the one a bootstrap or reindex stages, which
is how a reindex applies what changed. Unset counts keep what cdcsync always did: 1 shard, 0 replicas.

At a follower's start (``open``), a live index is compared with what is configured, and only with that (a
setting the config leaves out is the index's own business, an operator's included):

=============================  ==============================================================
configured and different       done
=============================  ==============================================================
``replicas``, a dynamic        applied in place (``_settings``): Elasticsearch itself says
setting (``refresh_interval``)  which settings it cannot change on an open index, and those
                               are reported
``shards``, ``analysis``       reported: only a new index takes them
a new field                    added in place (``_mapping``), as a new column's field is
a field's changed mapping      tried in place (some parameters may change); one the server
                               refuses (a type, an analyzer) is reported
=============================  ==============================================================

A report is a WARNING naming ``cdcsync reindex FOLLOWER --table TARGET``, and the table is recorded as
needing that reindex (``sync.reindex_needed``, ``origin`` topics: the topics hold every row, only the index
must be new): ``cdcsync status`` and ``verify`` list it, ``cdcsync_reindex_needed`` is 1. The next ``open``
that finds nothing left to do (the reindex ran, or the config was set back) clears it. Nothing is closed or
reopened: closing an index takes it from readers, which a reindex's alias swap never does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import ApiError, Elasticsearch

from cdcsync.config import Config, FollowerConfig
from cdcsync.config.index import IndexSettings, flat_settings
from cdcsync.errors import FatalError
from cdcsync.sync import reindex_needed
from cdcsync.sync.sinks.elasticsearch_errors import reason
from cdcsync.sync.sinks.elasticsearch_fields import DECIMAL_FIELD, JSON_FIELD

log = logging.getLogger(__name__)

SHARDS, REPLICAS, REFRESH = "index.number_of_shards", "index.number_of_replicas", "index.refresh_interval"
# Only a new index takes these: Elasticsearch refuses them on an open index, and closing it would take it from
# readers. Other settings are tried in place, and the server's answer names the static ones.
NEW_INDEX_ONLY = (SHARDS, "index.analysis.")
STATIC = re.compile(r"non dynamic settings \[\[([^\]]*)\]\]")

Drift = Callable[[str, "str | None"], None]  # (target, what only a new index takes; None: nothing) -> None


@dataclass(frozen=True)
class IndexSpec:
    """One target's index settings: counts (None: not configured), flat settings, configured field mappings."""

    shards: int | None = None
    replicas: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)  # flat: index.x.y -> value (``flat_settings``)
    properties: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, index: IndexSettings) -> IndexSpec:
        return cls(index.shards, index.replicas, index.flat(), dict(index.mappings.properties))

    @property
    def refresh_interval(self) -> str | None:
        """The index's own refresh interval (None: the server's default): what ``publish`` puts back."""
        value = self.settings.get(REFRESH)
        return None if value is None else str(value)

    def create_settings(self, fill: bool = False) -> dict[str, Any]:
        """A new index's settings; ``fill``: a staged one, nobody searches it until publish (no refresh)."""
        settings = {
            SHARDS: self.shards or 1,
            REPLICAS: 0 if self.replicas is None else self.replicas,
            **self.settings,
        }
        if fill:
            settings[REFRESH] = "-1"
        return settings

    def configured(self) -> dict[str, Any]:
        """What a live index is compared with: the configured settings only, counts included when set."""
        counts = {SHARDS: self.shards, REPLICAS: self.replicas}
        return {**{k: v for k, v in counts.items() if v is not None}, **self.settings}


class IndexSpecs:
    """Each target's ``IndexSpec``; a target the config does not name takes ``default``."""

    def __init__(self, default: IndexSpec | None = None, by_target: Mapping[str, IndexSpec] | None = None) -> None:
        self.default = default or IndexSpec()
        self.by_target = dict(by_target or {})

    @classmethod
    def of_settings(cls, settings: Mapping[str, Any] | None) -> IndexSpecs:
        """Free-form settings for every target (no counts, no fields): a sink built without a config."""
        return cls(IndexSpec(settings=flat_settings(settings or {})))

    @classmethod
    def of_config(cls, config: Config, follower: FollowerConfig) -> IndexSpecs:
        by_target = {
            follower.target_for(source.name, table): IndexSpec.of(follower.index_for(source.name, table))
            for source, table in config.followed_tables(follower)
        }
        return cls(IndexSpec.of(follower.index or IndexSettings()), by_target)

    def of(self, target: str) -> IndexSpec:
        return self.by_target.get(target, self.default)


def drift_recorder(config: Config, follower: FollowerConfig) -> Drift:
    """Record (or clear) each target's table as needing a reindex for its index settings (``sync.reindex_needed``)."""
    tables = {follower.target_for(s.name, t): str(t) for s, t in config.followed_tables(follower)}

    def record(target: str, what: str | None) -> None:
        table = tables.get(target)
        if table is None:
            return
        if what is None:
            reindex_needed.clear(config, follower.name, [table], origin="topics")
        else:
            reindex_needed.record(config, follower.name, table, f"index settings: {what}", origin="topics")

    return record


def bring_live(
    client: Elasticsearch, follower: str, alias: str, props: Mapping[str, Any], spec: IndexSpec, check: bool
) -> list[str]:
    """Put the fields on the live indexes behind ``alias``; ``check``: their settings too. What only a new one takes.

    ``props`` are cdcsync's fields for the columns; the configured ones (``spec.properties``) go over them. A 400
    about cdcsync's own (a column that changed type) is raised as the server's ``ApiError``.
    """
    held = held_fields(client, alias)
    props = {**keep_legacy_fields(follower, alias, props, held), **spec.properties}
    needs = put_fields(client, alias, props, spec.properties, held)
    return needs + (reconcile(client, alias, spec) if check else [])


def report(follower: str, alias: str, target: str, needs: list[str], on_drift: Drift | None) -> None:
    """Say what of the target's configured settings only a new index takes, or that nothing is left to take."""
    if needs:
        log.warning(
            "follower=%s index=%s reindex_needed: %s: only a new index takes them; run `cdcsync reindex %s --table %s`",
            follower, alias, "; ".join(needs), follower, target,
        )  # fmt: skip
    if on_drift is not None:
        on_drift(target, "; ".join(needs) or None)


def held_fields(client: Elasticsearch, alias: str) -> dict[str, Any]:
    """The field mappings of the indexes behind ``alias``."""
    held: dict[str, Any] = {}
    for index in client.indices.get_mapping(index=alias).values():
        held.update(index.get("mappings", {}).get("properties", {}))
    return held


def keep_legacy_fields(follower: str, alias: str, props: Mapping[str, Any], held: Mapping[str, Any]) -> dict[str, Any]:
    """Leave fields an index of an earlier cdcsync mapped otherwise as they are, and say how to upgrade.

    Decimals mapped ``keyword`` still hold the exact digits, and readers' term queries work; json columns
    mapped as a dynamic object still take rows of the first row's shape. A mapping can change neither in
    place, so only a reindex (a new generation, mapped as today) does.
    """
    decimals = [f for f, m in props.items() if m == DECIMAL_FIELD and held.get(f, {}).get("type") == "keyword"]
    if decimals:
        log.warning(
            "index=%s decimal fields %s are keyword (mapped by an earlier cdcsync): exact, but no range "
            "query or numeric sort; `cdcsync reindex %s` rebuilds them as numbers",
            alias,
            decimals,
            follower,
        )
    objects = [f for f, m in props.items() if m == JSON_FIELD and f in held and held[f].get("enabled", True)]
    if objects:
        log.warning(
            "index=%s json fields %s are dynamic objects (mapped by an earlier cdcsync): a row whose value has "
            "another shape is dead-lettered; `cdcsync reindex %s` maps them to take any JSON value",
            alias,
            objects,
            follower,
        )
    return {f: m for f, m in props.items() if f not in decimals and f not in objects}


def reconcile(client: Elasticsearch, alias: str, spec: IndexSpec) -> list[str]:
    """Bring the live indexes behind ``alias`` to ``spec`` where they can be in place; what only a new one takes.

    Raises ``FatalError`` for a setting the server refuses outright (an unknown setting, a bad value).
    """
    wanted = spec.configured()
    if not wanted:
        return []
    found = client.indices.get_settings(index=alias, flat_settings=True)
    names = sorted(found)
    held: dict[str, Any] = {}
    for name in names:  # one index behind an alias, unless a publish is under way
        for key, value in found[name].get("settings", {}).items():
            held.setdefault(key, value)
    differ = {key: value for key, value in wanted.items() if _text(value) != held.get(key)}
    needs = [_difference(key, held.get(key), differ.pop(key)) for key in list(differ) if key.startswith(NEW_INDEX_ONLY)]
    while differ:
        try:
            client.indices.put_settings(index=",".join(names), settings=differ)
        except ApiError as err:
            static = _static_keys(err) & set(differ)
            if not static and err.meta.status == 400:
                raise FatalError(
                    f"index {alias}: Elasticsearch refused the configured settings {sorted(differ)}: "
                    f"{reason(err.body.get('error', {}) if isinstance(err.body, dict) else {})}; fix the "
                    "follower's index.settings (or its mappings.<table>.index.settings)"
                ) from None
            if not static:
                raise
            needs += [_difference(key, held.get(key), differ.pop(key)) for key in sorted(static)]
            continue
        log.info("index=%s settings applied in place: %s", alias, ", ".join(f"{k}={v}" for k, v in differ.items()))
        break
    return needs


def put_fields(
    client: Elasticsearch, alias: str, props: Mapping[str, Any], own: Mapping[str, Any], held: Mapping[str, Any]
) -> list[str]:
    """Put the fields ``props`` on the live indexes; the configured fields (``own``) whose change was refused.

    A 400 about the other fields (a column that changed type) is raised as the server's ``ApiError``.
    """
    try:
        client.indices.put_mapping(index=alias, properties=dict(props))
        return []
    except ApiError as err:
        changed = [f for f in own if f in held and held[f] != own[f]]
        if err.meta.status != 400 or not changed:
            raise
    client.indices.put_mapping(index=alias, properties={f: m for f, m in props.items() if f not in changed})
    refused = []
    for name in changed:  # one at a time: the server may take some changes (ignore_above, a sub-field) in place
        try:
            client.indices.put_mapping(index=alias, properties={name: own[name]})
        except ApiError as err:
            if err.meta.status != 400:
                raise
            refused.append(f"field {name} is mapped {held[name]}, configured {own[name]}")
    return refused


def _static_keys(err: ApiError) -> set[str]:
    """The settings a 400 says an open index cannot change ("Can't update non dynamic settings [[a, b]]")."""
    found = STATIC.search(str(err.body)) if err.meta.status == 400 else None
    return set(found.group(1).split(", ")) if found else set()


def _difference(key: str, held: Any, wanted: Any) -> str:
    return f"{key} is {held if held is not None else 'unset'}, configured {wanted}"


def _text(value: Any) -> Any:
    """A configured value as Elasticsearch lists a setting: text, or a list of text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value
