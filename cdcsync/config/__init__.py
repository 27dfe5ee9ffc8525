"""The configuration's models and their validation: one YAML file, environment overrides, every problem listed.

- ``deployment``: the whole config (``Config``): sources, followers, Kafka and Connect settings;
- ``source``: a captured database (``SourceConfig``) and a table's name (``TableRef``);
- ``follower``: a follower, a class per kind of store (``FollowerConfig``), and its tables' mappings;
- ``index``: Elasticsearch index settings; ``runtime``: the daemon's Spark, Delta and metrics sections;
- ``base``: what every model shares (strict fields, secrets); ``env``: environment overrides;
- ``file``: reading a config file (``load_config``); ``reference``: docs/config.md and the JSON schema.

The models most code uses are handed on here.
"""

from __future__ import annotations

from cdcsync.config.base import MASK, SECRET_KEY
from cdcsync.config.deployment import Config, ConnectSettings, KafkaSettings
from cdcsync.config.follower import (
    DeltaFollowerConfig,
    ElasticsearchFollowerConfig,
    FollowerConfig,
    MappingType,
    RedisFollowerConfig,
    TableMappingConfig,
    VerifySettings,
)
from cdcsync.config.runtime import DeltaSettings, MetricsSettings, SparkSettings
from cdcsync.config.source import SourceConfig, TableRef

__all__ = [
    "MASK",
    "SECRET_KEY",
    "Config",
    "ConnectSettings",
    "DeltaFollowerConfig",
    "DeltaSettings",
    "ElasticsearchFollowerConfig",
    "FollowerConfig",
    "KafkaSettings",
    "MappingType",
    "MetricsSettings",
    "RedisFollowerConfig",
    "SourceConfig",
    "SparkSettings",
    "TableMappingConfig",
    "TableRef",
    "VerifySettings",
]
