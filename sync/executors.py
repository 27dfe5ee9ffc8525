"""Apply a micro-batch on Spark's executors: each Spark partition parses, maps and writes its own records.

Collecting a batch to the driver leaves one Python thread to parse, version
and map every record while the Kafka read waits for it to finish. Here each
Spark task runs ``Follower.process`` in a Python worker on its slice of the
batch: the JVM streams Arrow batches to the worker while it reads Kafka, the
worker writes a chunk while it parses the next, and tasks run side by side
(one per core in ``local[*]``, one per executor core on a cluster).

Why this is still effectively once, in order:

- A Kafka partition can be split across tasks (``minPartitions``), so two
  changes of one key may be written by two tasks at the same time. The apply
  rule decides, not arrival order: the sink keeps the highest version
  whichever write lands last (Elasticsearch external versions, the Redis
  compare script). That is why only these sinks run here; Delta's ``MERGE``
  commits from the driver.
- Spark records the batch's offsets only after every task returned, and a task
  returns only after its writes and its dead letters are acknowledged.
- Each task sends its ``BatchCounts`` back as JSON; the driver adds them up,
  checks that they add up, and records the metrics and the batch's log line.

A Python worker keeps its follower (sink client, dead-letter producer) between
batches: Spark reuses workers (``spark.python.worker.reuse``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from cdcsync.config import Config
from cdcsync.sync.follower import BatchCounts, Follower, arrow_records
from cdcsync.sync.mapping import TableMapping

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

KINDS = ("elasticsearch", "redis")  # sinks whose apply rule does not depend on the order of writes

_followers: dict[tuple[str, str], Follower] = {}  # per worker process: (config, follower) -> follower
KEEP = 8  # followers a worker keeps; a daemon has a few, each test its own


def batch_function(config: Config, follower: Follower) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function that applies each batch on the executors."""
    config_json = config.model_dump_json()
    # The config's JSON masks the source passwords; the snapshot-row lookup (MariaDB binlog positions) needs
    # them, so it travels as the driver built it.
    name, mappings, binlog_seq = follower.name, follower.mappings, follower.binlog_seq

    def batch(df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()

        def apply_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            import pyarrow as pa

            worker = _worker_follower(config_json, name, mappings)
            worker.binlog_seq = binlog_seq
            counts = worker.process(batch_id, arrow_records(batches))
            yield pa.RecordBatch.from_pydict({"counts": [counts.to_json()]})

        parts = df.mapInArrow(apply_partition, "counts binary").toArrow().column("counts").to_pylist()
        total = BatchCounts()
        for part in parts:
            total = total.merge(BatchCounts.from_json(part))
        follower.log_batch(batch_id, total, time.monotonic() - started)

    return batch


def _worker_follower(config_json: str, name: str, mappings: Mapping[str, TableMapping]) -> Follower:
    """This worker's follower: built on its first batch, reused after (connections, producer)."""
    follower = _followers.get((config_json, name))
    if follower is None:
        from cdcsync.sync.stream import build_follower

        config = Config.model_validate_json(config_json)
        cfg = next(f for f in config.followers if f.name == name)
        # The driver opened the sink (indexes, aliases, scripts); a worker only writes to it.
        follower = build_follower(config, cfg, None, mappings=dict(mappings), open_sink=False)
        follower.report = False
        _followers[(config_json, name)] = follower
        while len(_followers) > KEEP:  # a long-lived worker (tests, a restarted query) meets many configs
            oldest = next(iter(_followers))
            _followers.pop(oldest).sink.close()
    return follower
