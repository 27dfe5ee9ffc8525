"""One module per derived store, each implementing ``cdcsync.sync.sink.Sink``; ``build_sink`` picks one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError
from cdcsync.sync.position import base_dir
from cdcsync.sync.sink import Sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def sink_client_options(follower: FollowerConfig) -> dict[str, Any]:
    """The follower's credentials and CA as its sink's client options (``None``: not set); never in the URL."""
    password = follower.password.get_secret_value() if follower.password else None
    if follower.kind == "elasticsearch":
        return {
            "basic_auth": (follower.username, password) if follower.username and password is not None else None,
            "api_key": follower.api_key.get_secret_value() if follower.api_key else None,
            "ca_certs": follower.tls_ca,
        }
    return {"username": follower.username, "password": password, "ssl_ca_certs": follower.tls_ca}


def build_sink(config: Config, follower: FollowerConfig, spark: SparkSession | None) -> Sink:
    if follower.kind == "elasticsearch":
        from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink

        return ElasticsearchSink(
            follower.name,
            follower.url or "",
            index_prefix=follower.prefix,
            refresh_each_batch=follower.refresh_each_batch,
            **sink_client_options(follower),
        )
    if follower.kind == "redis":
        from cdcsync.sync.sinks.redis import RedisSink

        return RedisSink(follower.name, follower.url or "", prefix=follower.prefix, **sink_client_options(follower))
    if spark is None:
        raise FatalError(f"follower {follower.name}: the delta sink needs a Spark session")
    from cdcsync.sync.sinks.delta import DeltaSink

    path = follower.path or str(base_dir(config) / "warehouse" / follower.name)
    return DeltaSink(follower.name, spark, path, soft_delete=follower.soft_delete, history=follower.history)
