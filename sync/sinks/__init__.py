"""One module per derived store, each a class implementing ``cdcsync.sync.sink.Sink``.

The registry below maps a follower's ``kind`` to its class, imported when first
asked for. Each class says what the rest of cdcsync needs to know of its kind:
``order_free`` (its apply rule does not depend on the order of writes, so the
executors and several processes may write at once), ``needs_spark``,
``from_config`` (the sink a follower's config describes), ``probe`` (does
its server answer, for ``cdcsync status``), and the roles it plays among its
bases (``sync.sink``): one that can drop delete markers no replay needs any
more declares ``MarkerPurge`` (``sync.marker_purge``). Nothing outside this
package asks which kind a follower is; adding a store is a module here, a
line below and its follower's config class (``cdcsync.config.follower``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, cast

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError
from cdcsync.sync.sink import MarkerPurge, Sink, declares

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KINDS = {  # follower kind -> (module, class)
    "elasticsearch": ("cdcsync.sync.sinks.elasticsearch", "ElasticsearchSink"),
    "redis": ("cdcsync.sync.sinks.redis", "RedisSink"),
    "delta": ("cdcsync.sync.sinks.delta", "DeltaSink"),
}


class SinkClass(Protocol):
    """What a sink class says of its kind (class attributes and constructors, no instance needed)."""

    order_free: bool
    needs_spark: bool

    def from_config(self, config: Config, follower: FollowerConfig, spark: SparkSession | None) -> Sink: ...

    def probe(self, config: Config, follower: FollowerConfig, timeout_s: float) -> tuple[bool, str]: ...


def sink_class(follower: FollowerConfig) -> SinkClass:
    module, name = KINDS[follower.kind]
    return cast(SinkClass, getattr(importlib.import_module(module), name))


def build_sink(config: Config, follower: FollowerConfig, spark: SparkSession | None, fill: bool = False) -> Sink:
    """The follower's sink; ``fill``: one of a bootstrap's or reindex's other processes, which needs no session."""
    cls = sink_class(follower)
    if cls.needs_spark and spark is None and not fill:
        raise FatalError(f"follower {follower.name}: the {follower.kind} sink needs a Spark session")
    return cls.from_config(config, follower, spark)


def needs_spark(follower: FollowerConfig) -> bool:
    return sink_class(follower).needs_spark


def purges_markers(follower: FollowerConfig) -> bool:
    """Whether the follower's sink can remove delete markers past the compaction horizon: it declares
    ``MarkerPurge``."""
    return declares(cast(type, sink_class(follower)), MarkerPurge)


def probe(config: Config, follower: FollowerConfig, timeout_s: float) -> tuple[bool, str]:
    """Whether the follower's store answers, and what it said; raises what reaching it raised."""
    return sink_class(follower).probe(config, follower, timeout_s)


def secret(value: Any) -> str | None:
    """A config secret's value, or None when unset."""
    return value.get_secret_value() if value is not None else None
