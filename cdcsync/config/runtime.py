"""The config's process sections: the Spark session (``spark:``), Delta Lake's tuning (``delta:``), ``metrics:``.

They shape the process that runs the followers rather than what it syncs:
``cdcsync.spark`` builds the session from ``spark`` and ``delta``, the daemon
serves ``/metrics`` where ``metrics`` says. Like every setting, each is also
an environment variable (``CDCSYNC_SPARK_DRIVER_MEMORY``, ``CDCSYNC_DELTA_AUTO_COMPACT``,
``CDCSYNC_SPARK_CONF_<KEY>``: ``cdcsync.config.file``). The defaults and why
each is what it is: ``cdcsync.spark`` and docs/performance.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from cdcsync.config.base import Properties, Strict

# The fork server the Python workers are forked from: Spark's own (its pyspark.daemon), after importing once what
# every worker's first task imported (sync/fork_server.py). `pyspark.daemon`, Spark's module, runs Spark's alone.
FORK_SERVER = "cdcsync.sync.fork_server"
# How long each version of a Delta table keeps an entry for every file a commit replaced (Delta calls them
# tombstones, which have nothing to do with Kafka's; its default: a week). Every MERGE reads the version's
# whole state and every log checkpoint writes it, and a table MERGEd every few seconds gains ~6 a MERGE,
# ~150,000 a day. VACUUM without RETAIN keeps the replaced files this long (docs/performance.md,
# "Delta: replaced files' entries").
REPLACED_FILE_RETENTION = "interval 1 hours"
INTERVAL = re.compile(r"^interval \d+ (second|minute|hour|day|week)s?$")
UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def _switch(value: Any) -> Any:
    """``on``/``off`` written as a YAML boolean or as 1/0, true/false, yes/no."""
    text = str(value).lower()
    return {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}.get(text, text)


Switch = Annotated[Literal["auto", "on", "off"], BeforeValidator(_switch)]
LogLevel = Literal["OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"]


class SparkSettings(Strict):
    """The Spark session every command that applies or reads a store runs in."""

    master: str | None = Field(
        None, description="Spark master URL (default: local[2 x cores + 1,4], a failed task tried up to 4 times)"
    )
    driver_memory: str = Field("2g", description="the driver's heap (spark.driver.memory): it runs every follower")
    adaptive: bool = Field(False, description="Spark's adaptive query execution (slower MERGEs when on)")
    log_level: LogLevel = Field("ERROR", description="Spark's log level in the daemon's log")
    progress_log_level: LogLevel = Field(
        "ERROR", description="INFO logs each streaming batch's progress (where its time went)"
    )
    java_options: str = Field("", description="more options for the driver's JVM, after cdcsync's own")
    class_archive: Switch = Field(
        "auto",
        description="start the driver from the class archive made for its JVM: on, off, or each command's "
        "own choice (bootstrap and reindex without Spark work: on)",
    )
    worker_daemon: str = Field(
        FORK_SERVER, description="the module Spark forks Python workers from (pyspark.daemon: Spark's own)"
    )
    jars: str | None = Field(None, description="the directory of the Kafka and Delta jars (default <state>/lib/spark)")
    conf: Properties = Field(
        default_factory=dict,
        description="more Spark properties, applied last (spark.*; spark.hadoop.* reach Hadoop, e.g. fs.s3a.*)",
    )

    @field_validator("conf")
    @classmethod
    def _spark_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.startswith("spark."):
                raise ValueError(f"{key!r} is not a Spark property (spark.*; Hadoop's as spark.hadoop.<key>)")
        return value


class DeltaSettings(Strict):
    """How the delta followers write their Delta tables."""

    snapshot_partitions: int = Field(2, ge=1, description="partitions a table's log is read with (Delta's: 50)")
    deletion_vectors: bool = Field(True, description="new tables mark replaced rows instead of rewriting files")
    auto_compact: bool = Field(True, description="rewrite a table's small files after the commits that leave many")
    replaced_file_retention: str = Field(
        REPLACED_FILE_RETENTION,
        description="how long new tables keep replaced files' entries (delta.deletedFileRetentionDuration)",
    )
    tables_at_once: int = Field(2, ge=1, description="a batch's tables MERGEd at the same time")
    upkeep_every_s: float = Field(
        3600, ge=0, description="how often the daemon runs OPTIMIZE and VACUUM on each Delta table (0: never)"
    )
    retention_hours: int = Field(
        168,
        ge=1,
        description="VACUUM removes only the files that no table version of the last this many hours reads (time "
        "travel, a slow reader); at least replaced_file_retention",
    )

    @field_validator("replaced_file_retention")
    @classmethod
    def _interval(cls, value: str) -> str:
        if not INTERVAL.fullmatch(value):
            raise ValueError(f"{value!r} is not a Delta interval: want e.g. 'interval 1 hours' or 'interval 7 days'")
        return value

    @model_validator(mode="after")
    def _vacuum_within_retention(self) -> DeltaSettings:
        # Delta refuses a VACUUM whose window is shorter than the table's deletedFileRetentionDuration.
        if self.retention_hours * 3600 < interval_s(self.replaced_file_retention):
            raise ValueError(
                f"retention_hours {self.retention_hours} is shorter than replaced_file_retention "
                f"({self.replaced_file_retention}): Delta refuses such a VACUUM"
            )
        return self


def interval_s(interval: str) -> int:
    """Seconds of a Delta interval (``interval 7 days``)."""
    _, count, unit = interval.split()
    return int(count) * UNIT_S[unit.rstrip("s")]


class MetricsSettings(Strict):
    """Where the daemon serves /metrics and /healthz, and where `status` reads them."""

    host: str = Field("127.0.0.1", description="the address to listen on (loopback unless set)")
    port: int = Field(19400, ge=0, le=65535, description="the port; 0: no metrics server")
