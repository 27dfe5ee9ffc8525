"""Build the Spark session every follower runs in: Kafka source and Delta Lake on the classpath.

Its settings are the config's ``spark`` and ``delta`` sections (``cdcsync.config.runtime``;
without a config, what the environment gives). The class path and the
driver's options come from ``cdcsync.driver``. Imported only by commands that need Spark.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from cdcsync.driver import connector_jars, driver_java_options, session_jars, uses_s3a

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcsync.config import Config


# A query told to stop gives up waiting for its tasks after this (spark.sql.streaming.stopTimeout): a batch the
# daemon cancels (sync/deadline.py) must stop within it, or its process starts again.
STOP_TIMEOUT_S = 30.0
FETCHED_DATA_IDLE = "20s"  # how long Spark may keep a Kafka task's polled records for the next task (spark_session)
LOCAL_FILE_CONTEXT = "org.apache.hadoop.fs.local.RawLocalFs"  # local checkpoint files without .crc companions
CODEGEN_CACHE_ENTRIES = "2000"  # compiled generated classes kept per JVM (Spark's default: 100)
# Small files of a Delta table that start an auto compaction (Delta's default: 50). A table updated in place at
# 1k changes/s keeps ~50 live small files (each MERGE's are replaced when their rows next change), so 50 would
# compact every few MERGEs, each compaction a slower batch. Each file costs a MERGE ~0.6 ms (bench.delta_compaction).
COMPACT_AT_FILES = "200"
# Versions between the log checkpoints Delta writes inside a commit (its default: 10, so every tenth MERGE also
# wrote the table's whole state, ~40 % slower than its neighbours). cdcsync writes them every 10 versions on a
# thread beside the batches (sync/sinks/delta_checkpoints.py); this is only the fallback for other writers.
CHECKPOINT_INTERVAL = "1000"
# Rows per Parquet page at most (Parquet's default: 20,000): the unit a Delta MERGE's key predicate reads or
# skips (docs/performance.md, "Delta: a MERGE that prunes by key").
PAGE_ROWS = "200"
# Keys per IN list that Spark hands to Parquet as one equality per key (its default: 10; a longer list goes as its
# range): the lists of the Delta MERGE's key predicate (sync/sinks/delta.py, among).
IN_CHUNK = 64


def result_bound(driver_memory: str) -> str:
    """A quarter of a JVM memory size such as ``2g`` or ``1536m``, as ``spark.driver.maxResultSize`` (``512m``)."""
    units = {"k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}  # in KiB
    text = driver_memory.strip().lower().removesuffix("b")
    kib = int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text) // 1024
    return f"{max(kib // 4 // 1024, 64)}m"


def default_master() -> str:
    """``local[2 x cores + 1, 4]``: two task slots per core and one more, and up to 4 attempts per task.

    Plain ``local[N]`` runs each task once, so one lost task fails the batch
    and the query. A follower's full batch (one that is behind) takes two tasks
    per core (``sync.batching.task_options``), and one whose sink hangs holds
    its tasks' slots while it waits: the extra slot is the one the others
    still find free, whatever that follower holds
    (``tests/chaos/test_hung_follower_behind.py``). Two followers hung at once
    can hold every slot. More slots per core cost steady freshness (more tasks
    at once on the same cores) and memory: each slot can keep a Python worker
    alive (~220 MB with wide rows; docs/performance.md, "Tasks per batch").
    """
    return f"local[{2 * (os.cpu_count() or 1) + 1},4]"


def spark_session(
    app_name: str,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    *,
    class_archive: bool = False,
    config: Config | None = None,
) -> SparkSession:
    """The session (``getOrCreate``); ``class_archive``: a new driver starts from it (``driver_java_options``).

    ``master`` and ``conf`` (a command's own) win over the config's ``spark.master`` and ``spark.conf``.
    """
    from pyspark.sql import SparkSession

    from cdcsync.config.file import environment_config

    config = config if config is not None else environment_config()
    spark, delta = config.spark, config.delta
    # Python workers (followers applying batches on executors) run this interpreter, which has cdcsync.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Read by the driver JVM's log4j configuration (cdcsync/log4j2.properties) as it starts.
    levels = f"-Dcdcsync.spark.logLevel={spark.log_level} -Dcdcsync.spark.progressLogLevel={spark.progress_log_level}"
    master = master or spark.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Under spark-submit (deploy/spark/submit.py) the JVM is already up with the submitted --master.
        master = default_master()
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = {**spark.conf, **(conf or {})}
    paths = [f.path or "" for f in config.followers if f.spark_tables]
    jars = session_jars(connector_jars(spark), uses_s3a(paths, settings))  # S3A's only for object storage
    builder = (
        builder.config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # The driver runs every follower (and, locally, the executors): 2 GiB holds three followers' batches
        # of max_batch_bytes each, with their Arrow and Delta MERGE copies (docs/daemon.md, "Memory").
        .config("spark.driver.memory", spark.driver_memory)
        # Results collected into the driver (a Delta follower's batch, verify's digests) fail past a quarter of
        # its heap, where 1g of a 2g heap could end in an OutOfMemoryError in a task-result-getter thread, and
        # the collect waiting for those results would wait forever (sync/deadline.py, sync/batching.shrink).
        .config("spark.driver.maxResultSize", result_bound(spark.driver_memory))
        # A query told to stop (sync/deadline.py cancels a stalled batch) gives up waiting after this, rather than
        # waiting forever on a batch thread the JVM cannot free.
        .config("spark.sql.streaming.stopTimeout", f"{STOP_TIMEOUT_S:.0f}s")
        .config("spark.sql.shuffle.partitions", "4")
        # Adaptive execution runs each shuffle stage of a plan as a job of its own, to re-plan between them. A
        # Delta MERGE of a few thousand rows ran 19 jobs with it and 14 without, and took ~10% less time in
        # the daemon at 1k changes/s (docs/performance.md, "Delta: adaptive execution off"). Streaming batches
        # never use it. spark.adaptive turns it back on.
        .config("spark.sql.adaptive.enabled", str(spark.adaptive).lower())
        # Spark keeps compiled generated code in a cache of 100 entries by default. Three followers' batches
        # and the delta sink's MERGE stages outgrow it: the same classes were compiled again ~3 times a second,
        # each then loaded and JIT-compiled anew (docs/performance.md, "Generated code").
        .config("spark.sql.codegen.cache.maxEntries", CODEGEN_CACHE_ENTRIES)
        # Delta's default of 50 partitions for reading a table's log makes every MERGE slow on small machines.
        .config("spark.databricks.delta.snapshotPartitions", str(delta.snapshot_partitions))
        # A MERGE whose source is not a Delta table first copies its source into Spark's block manager (one more
        # job, one more copy of the batch on the heap), in case reading it twice gave different rows. The
        # Delta MERGE's source is the batch itself, built from Arrow on the driver (sync/sinks/delta_values.frame): the
        # same rows every read. A MERGE of 5,000 rows into 50,000, median of 15: 2.19 s against 2.27 s.
        .config("spark.databricks.delta.merge.materializeSource", "none")
        # New Delta tables take deletion vectors: a MERGE of scattered keys marks the old rows deleted
        # instead of rewriting every file it touches (bench.delta_merge: 11x fewer bytes written; the table
        # of bench.memory grew 27 GB in 116 MERGEs without). Readers need Delta 2.3+ (docs/performance.md).
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", str(delta.deletion_vectors).lower())
        # Every MERGE adds a few small files (one per shuffle partition), and Delta removes a file only once all its
        # rows are replaced: a table that gains rows (inserts) keeps every one. At a MERGE each few seconds that
        # is tens of thousands of files a day, and each MERGE reads them all (bench.delta_compaction: 5.95 s into
        # 8,000 files, 1.48 s into 50).
        # Auto compaction rewrites a table's small files into larger ones, in the writer's own call, after a commit
        # that leaves COMPACT_AT_FILES of them, counted from this process's commits; and once after the first write
        # of each table in each process (Delta's rule, docs/performance.md "Delta: auto compaction").
        # delta.auto_compact: false turns it off.
        .config("spark.databricks.delta.autoCompact.enabled", str(delta.auto_compact).lower())
        .config("spark.databricks.delta.autoCompact.minNumFiles", COMPACT_AT_FILES)
        # How long a table version keeps the entries of the files commits replaced (config_runtime).
        .config(
            "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration", delta.replaced_file_retention
        )
        .config("spark.databricks.delta.properties.defaults.checkpointInterval", CHECKPOINT_INTERVAL)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # progress bars would fill the daemon's log
        .config("spark.driver.extraJavaOptions", f"{levels} {driver_java_options(class_archive, spark)}")
        # Arrow batches handed to the Python workers: bounded in bytes as well as rows (wide rows, sync/batching).
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(8 * 1024 * 1024))
        # Parquet's vectorized reader reserves one contiguous buffer per column for a batch of rows: 4,096
        # (its default) rows of 60 KB text are 245 MB. Delta's MERGE and verify read wide tables this way.
        .config("spark.sql.parquet.columnarReaderBatchSize", "128")
        # A Parquet row group is buffered whole by the writer and read whole by the reader, per task: at the
        # default 128 MB, a MERGE rewriting a table of 60 KB rows held several at once and the 2 GiB heap ran
        # out (bench.memory, 100k changes over 10k rows). 16 MB row groups bound that to a few tens of MB.
        .config("spark.hadoop.parquet.block.size", str(16 * 1024 * 1024))
        # The Delta MERGE's key predicate (sync/sinks/delta.py, among): an IN list of up to this many keys goes
        # to Parquet as an equality per key, which its page indexes test one by one (a longer list: its range).
        .config("spark.sql.parquet.pushdown.inFilterThreshold", str(IN_CHUNK))
        # A page is what a MERGE's key predicate skips or reads: a MERGE of 1,000 keys into a table ordered by key
        # reads ~1,000 pages of it, whatever its size.
        .config("spark.hadoop.parquet.page.row.count.limit", PAGE_ROWS)
        .config("spark.sql.session.timeZone", "UTC")
        # Spark keeps each Kafka task's last poll of records in a pool, for a next task that starts where it
        # stopped, and by default lets an idle entry go only after 5 minutes. A split batch (sync.executors)
        # leaves a new entry each time: bench.memory's driver held 222 of them, 6,232 records of 60 KB,
        # 850 MB of its 2 GiB heap. Idle entries now go after 20 s (a follower's next batch comes sooner).
        .config("spark.kafka.consumer.fetchedData.cache.timeout", FETCHED_DATA_IDLE)
        .config("spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval", "5s")
        # A streaming checkpoint on local disk is written through Hadoop's FileContext, whose local
        # filesystem writes and renames a hidden .crc beside each small offset and commit file: twice the
        # file operations of every batch's two checkpoint writes (docs/performance.md, "checkpoint writes").
        .config("spark.hadoop.fs.AbstractFileSystem.file.impl", LOCAL_FILE_CONTEXT)
        # The fork server the Python workers are forked from (config_runtime.FORK_SERVER).
        .config("spark.python.daemon.module", spark.worker_daemon)
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(spark.log_level)
    return session
