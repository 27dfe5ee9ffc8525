"""One PySpark Structured Streaming query per follower: Kafka source, ``foreachBatch``, own checkpoint.

This module starts a follower's query (``start_query``); the follower is
built in ``sync.build``, positions are kept in ``sync.position``.

Followers never block each other: each is its own query with its own
checkpoint directory (its position in the log) and its own sink. The batch
function runs on the driver and hands the records to ``Follower.process``;
Spark commits a batch's offsets to the checkpoint only after it returns.

The Kafka source reads compacted topics, whose offsets have gaps by design,
hence ``failOnDataLoss=false``. Because that option would also pass over a
lost position silently, ``start_query`` first checks the follower's position
(``sync.position``): lost, or past the compaction horizon, the follower
refuses to start and names ``reindex``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

from cdcsync import kafka
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import RetryableError
from cdcsync.state import base_dir
from cdcsync.sync import batch_reader, batching, deadline, executors, held
from cdcsync.sync.follower import Follower
from cdcsync.sync.position import check_position, checkpoint_dir, resume_position, start_file

log = logging.getLogger("cdcsync.stream")

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def starting_offsets(config: Config, follower: FollowerConfig, topics: list[str]) -> str:
    """Spark's ``startingOffsets`` for a query: only read when its checkpoint is new.

    Spark wants every partition named once offsets are given: a topic the
    bootstrap did not cover (``--table``) starts from its beginning (-2).
    """
    path = start_file(base_dir(config), follower.name)
    if not path.exists():
        return "earliest"
    recorded = json.loads(path.read_text())["offsets"]
    with kafka.admin(config.kafka.client_config()) as admin:
        metadata = admin.list_topics(timeout=30).topics
    offsets: dict[str, dict[str, int]] = {}
    for topic in topics:
        partitions = metadata[topic].partitions if topic in metadata else {0: None}
        offsets[topic] = {str(p): int(recorded.get(topic, {}).get(str(p), -2)) for p in partitions}
    return json.dumps(offsets)


def present_topics(config: Config, topics: list[str]) -> list[str]:
    """The topics among ``topics`` that exist: a table whose connector was not applied yet has none."""
    with kafka.admin(config.kafka.client_config()) as admin:
        metadata = admin.list_topics(timeout=30).topics
    return [t for t in topics if t in metadata]


def start_query(
    spark: SparkSession, config: Config, follower: FollowerConfig, running: Follower, once: bool = False
) -> StreamingQuery:
    topics = present_topics(config, sorted(running.mappings))
    missing = sorted(set(running.mappings) - set(topics))
    if not topics:
        raise RetryableError(
            f"follower {follower.name}: none of its tables' topics exist ({', '.join(missing)}); "
            "run `cdcsync connectors apply`"
        )
    if missing:  # its other tables go on; the daemon restarts it once they exist (sync.daemon, sync.supervisor)
        log.warning(
            "follower=%s not following %s yet: no such topic; run `cdcsync connectors apply`", follower.name, missing
        )
    check_position(config, follower, topics)
    resumed = resume_position(config, follower)
    sizes = batching.sample_sizes(config, topics, resumed[0] if resumed else {})
    per_batch = batching.shrunk(
        follower.name, batching.records_per_batch(follower.batch_bytes, sizes, follower.batch_records)
    )
    log.info("follower=%s max_records_per_batch=%d sampled=%d", follower.name, per_batch, len(sizes))
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.kafka.bootstrap_servers)
        .option("subscribe", ",".join(topics))
        # A topic new to a running follower (a table added to it) is read from its start: Spark reads
        # partitions missing from the checkpoint from their earliest offset (docs/schema-changes.md).
        .option("startingOffsets", starting_offsets(config, follower, topics))
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", per_batch)
        # SASL/SSL for Spark's Kafka consumer: its options prefixed kafka. (values never logged)
        .options(**{f"kafka.{k}": v for k, v in config.kafka.java_properties.items()})
    )
    if running.sink.order_free and not running.on_driver:
        # Split each Kafka partition's slice of a batch so every core gets a task, a full batch locally two
        # per core (sync.batching.task_options). Cores, not task slots: the local master has more (cdcsync.spark).
        context = spark.sparkContext
        cores, local = context.defaultParallelism, (context.master or "").startswith("local")
        if local:
            cores = min(cores, os.cpu_count() or 1)
        source = source.options(**batching.task_options(per_batch, cores, local))
        batch = executors.batch_function(config, running, checkpoint_dir(config, follower))
    else:
        checkpoint = checkpoint_dir(config, follower)

        def batch(df: DataFrame, batch_id: int) -> None:
            # The batch's records are read by its offsets, never collected into the JVM (sync.batch_reader).
            start, end = batch_reader.batch_span(checkpoint, batch_id)
            out = held.before_batch(config, running, start, batch_reader.replay(config, running, batch_id))
            kept = {topic: offsets for topic, offsets in start.items() if topic not in out}
            counts = running.process(batch_id, batch_reader.read_span(config, follower.name, batch_id, kept, end))
            held.after_batch(config, running, counts, start)

    writer = (
        source.load()
        .select("topic", "partition", "offset", "key", "value")
        .writeStream.queryName(f"cdcsync-{follower.name}")
        .foreachBatch(
            deadline.watched(follower.name, deadline.deadline_s(follower.batch_deadline_s, follower.batch_bytes), batch)
        )
        .option("checkpointLocation", str(checkpoint_dir(config, follower)))
    )
    writer = (
        writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{follower.trigger_s} seconds")
    )
    return writer.start()
