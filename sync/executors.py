"""Apply a micro-batch on Spark's executors: each Spark partition parses, maps and writes its own records.

Collecting a batch to the driver leaves one Python thread to parse, version
and map every record while the Kafka read waits for it to finish. Here each
Spark task runs ``Follower.process`` in a Python worker on its slice of the
batch: the JVM streams Arrow batches to the worker while it reads Kafka, the
worker writes a chunk while it parses the next, and tasks run side by side
(at least one per core, and locally two per core when the follower is behind:
``sync.batching.task_options``; one per executor core on a cluster).

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

Secrets are not shipped with the config: ``sync.shipped`` says how a worker
gets them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cdcsync import metrics
from cdcsync.config import Config
from cdcsync.errors import TableError
from cdcsync.sync import batch_reader, held, shape
from cdcsync.sync.arrow_records import arrow_records
from cdcsync.sync.batch_counts import BatchCounts
from cdcsync.sync.build import build_follower
from cdcsync.sync.follower import Follower
from cdcsync.sync.fork_server import reread_zips_only_when_changed
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.shape import shape_changed, shapes_changed
from cdcsync.sync.shipped import shipped_config, worker_secrets

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

_followers: dict[tuple[str, str, int], Follower] = {}  # per worker: (config, follower, secrets) -> follower
KEEP = 8  # followers a worker keeps; a daemon has a few, each test its own


def batch_function(config: Config, follower: Follower, checkpoint: Path) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function that applies each batch on the executors.

    Tables the follower holds (``sync.held``) are left out of the batch; one
    whose retry is due is replayed on the driver first.
    """
    config_json = shipped_config(config, follower.name)
    # The snapshot-row lookup (MariaDB binlog positions) needs its sources' passwords: a worker builds its own
    # from the config its secrets file completes. The driver's, pickled, would carry the passwords in clear.
    name, lookup = follower.name, follower.binlog_seq is not None

    def batch(df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions

        started = time.monotonic()
        start = batch_reader.batch_span(checkpoint, batch_id)[0]
        out = held.before_batch(config, follower, start, batch_reader.replay(config, follower, batch_id))
        if out:
            df = df.where(~functions.col("topic").isin(sorted(out)))
        # The shape changes learned for this batch: each retry learns at least one more, so this ends.
        tried: set[tuple[str, tuple[frozenset[str], frozenset[str]]]] = set()
        while True:
            # The tables' shapes as the driver knows them now, for this batch.
            apply_partition = task_function(config_json, name, lookup, dict(follower.mappings), batch_id)
            try:
                parts = df.mapInArrow(apply_partition, "counts binary").toArrow().column("counts").to_pylist()
                break
            except Exception as err:
                # Tables whose changes brought columns their mapping lacks: the driver reads them, then runs the
                # batch again (a failed task's error may name only its own table: as many tries as it takes).
                changed = {t: c for t, c in shapes_changed(str(err)).items() if (t, c) not in tried}
                if changed:
                    for topic, (unknown, lacking) in changed.items():
                        tried.add((topic, (unknown, lacking)))
                        try:
                            follower.relearn(topic, unknown, lacking)
                        except TableError as refused:  # the sink refused this table's new shape: held alone
                            held.hold_refused(config, follower, topic, refused, start)
                            out.add(topic)
                            df = df.where(functions.col("topic") != topic)
                    continue
                count_failed_retries(name, str(err))
                raise
        total = BatchCounts()
        for part in parts:
            total = total.merge(BatchCounts.from_json(part))
        for topic, columns in total.lacking.items():  # written without them; a DROP is forgotten in every row now
            if shape.differences(follower.mappings[topic], follower.mappings[topic].plan.keys() - set(columns))[1]:
                follower.relearn(topic, shape.NONE, frozenset(columns))
        metrics.SINK_RETRIES.labels(name).inc(total.retries)  # the executors' retries of this batch
        if total.applied:
            follower.make_visible(total)
        follower.log_batch(batch_id, total, time.monotonic() - started)
        held.after_batch(config, follower, total, start)

    return batch


def task_function(
    config_json: str, name: str, lookup: bool, mappings: dict[str, TableMapping], batch_id: int
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What each task of a batch runs, and all it takes with it: the config without its secrets (``sync.shipped``)."""

    def apply_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        reread_zips_only_when_changed()
        worker = _worker_follower(config_json, name, mappings)
        worker.mappings = dict(mappings)
        if not lookup:
            worker.binlog_seq = None
        counts = worker.process(batch_id, arrow_records(batches))
        yield pa.RecordBatch.from_pydict({"counts": [counts.to_json()]})

    return apply_partition


FAILED_AFTER = re.compile(r"sink still failing after (\d+) attempts")


def count_failed_retries(follower: str, error: str) -> None:
    """A batch whose tasks gave up on the sink: count their retries, which no BatchCounts brings back."""
    for attempts in FAILED_AFTER.findall(error):
        metrics.SINK_RETRIES.labels(follower).inc(int(attempts) - 1)


def _worker_follower(config_json: str, name: str, mappings: Mapping[str, TableMapping]) -> Follower:
    """This worker's follower: built on its first batch, reused after (connections, producer)."""
    shipped = json.loads(config_json)
    secrets = worker_secrets(shipped, name)
    key = (config_json, name, hash(tuple(secrets)))  # a rotated secret builds a new follower
    follower = _followers.get(key)
    if follower is None:
        config = Config.with_secrets(shipped["config"], dict(secrets))
        cfg = next(f for f in config.followers if f.name == name)
        # The driver opened the sink (indexes, aliases, scripts); a worker only writes to it.
        follower = build_follower(config, cfg, None, mappings=dict(mappings), open_sink=False)
        follower.report = False
        follower.learn = shape_changed  # no source credentials here: a changed shape goes back to the driver
        _followers[key] = follower
        while len(_followers) > KEEP:  # a long-lived worker (tests, a restarted query) meets many configs
            oldest = next(iter(_followers))
            _followers.pop(oldest).sink.close()
    return follower
