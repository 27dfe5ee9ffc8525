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

Secrets are not shipped (docs/secrets.md). A task receives the config as
``Config.redacted()`` (every password, API key and secret-looking property
masked) and the path of a file the driver wrote, mode 0600 under the state
directory, holding this follower's secrets (and the MariaDB sources'
passwords its snapshot-row lookup needs); the worker puts them back.
Locally the workers are the driver's user on the driver's machine and read
it. On a cluster that path must be on storage every executor sees (readable
only by the user Spark runs as), or, when it is absent, the worker takes the
secrets from its own environment: ``CDCSYNC_FOLLOWER_<NAME>_PASSWORD``,
``..._API_KEY`` and ``CDCSYNC_KAFKA_PROPERTY_<KEY>`` (set on each worker
node, e.g. in ``conf/spark-env.sh``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcsync import metrics
from cdcsync.config import ENV_PREFIX, MASK, Config
from cdcsync.errors import FatalError
from cdcsync.sync.follower import BatchCounts, Follower, arrow_records
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.shape import shape_changed, shapes_changed

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

_followers: dict[tuple[str, str, int], Follower] = {}  # per worker: (config, follower, secrets) -> follower
KEEP = 8  # followers a worker keeps; a daemon has a few, each test its own


def batch_function(config: Config, follower: Follower) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function that applies each batch on the executors."""
    config_json = shipped_config(config, follower.name)
    # The snapshot-row lookup (MariaDB binlog positions) needs its sources' passwords: a worker builds its own
    # from the config its secrets file completes. The driver's, pickled, would carry the passwords in clear.
    name, lookup = follower.name, follower.binlog_seq is not None

    def batch(df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        for attempt in (1, 2):
            mappings = dict(follower.mappings)  # the tables' shapes as the driver knows them now, for this batch

            def apply_partition(
                batches: Iterable[pa.RecordBatch], mappings: dict[str, TableMapping] = mappings
            ) -> Iterator[pa.RecordBatch]:
                import pyarrow as pa

                reread_zips_only_when_changed()
                worker = _worker_follower(config_json, name, mappings)
                worker.mappings = dict(mappings)
                if not lookup:
                    worker.binlog_seq = None
                counts = worker.process(batch_id, arrow_records(batches))
                yield pa.RecordBatch.from_pydict({"counts": [counts.to_json()]})

            try:
                parts = df.mapInArrow(apply_partition, "counts binary").toArrow().column("counts").to_pylist()
                break
            except Exception as err:
                changed = shapes_changed(str(err))
                if attempt == 1 and changed:  # a table's shape changed: the driver reads it, then again
                    for topic, (unknown, lacking) in changed.items():
                        follower.relearn(topic, unknown, lacking)
                    continue
                count_failed_retries(name, str(err))
                raise
        total = BatchCounts()
        for part in parts:
            total = total.merge(BatchCounts.from_json(part))
        metrics.SINK_RETRIES.labels(name).inc(total.retries)  # the executors' retries of this batch
        if total.applied:
            follower.make_visible(total)
        follower.log_batch(batch_id, total, time.monotonic() - started)

    return batch


FAILED_AFTER = re.compile(r"sink still failing after (\d+) attempts")


def reread_zips_only_when_changed() -> None:
    """In this Python worker, stop every task re-reading the zip archives on ``sys.path`` that have not changed.

    Spark starts each task in a worker with ``importlib.invalidate_caches()``
    (``pyspark.worker_util.setup_spark_files``), and on Python before 3.13 a
    ``zipimporter`` then re-reads its archive's whole directory. Spark puts
    three archives on the workers' path: ``pyspark.zip`` (1,220 entries) and the
    spark-core jar (5,261), about 0.1-0.35 s of CPU per task on this machine;
    py-spy found half of the workers' samples there during a catch-up. An
    archive whose size and modification time are unchanged is skipped; a
    changed one is read again, as before. Worker processes are reused between
    tasks (``spark.python.worker.reuse``), so this is paid once per worker, and
    not even once by a worker forked from cdcsync's daemon, which read the
    archives before it forked (``sync.worker_daemon``). Tasks still call it, for
    workers forked by Spark's own daemon (``CDCSYNC_SPARK_WORKER_DAEMON``).
    """
    import zipimport

    reread = zipimport.zipimporter.invalidate_caches
    if getattr(reread, "cdcsync_lazy", False):
        return
    seen: dict[str, tuple[int, int]] = {}

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        try:
            stat = os.stat(self.archive)
        except OSError:
            reread(self)
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if seen.get(self.archive) != stamp:
            reread(self)
            seen[self.archive] = stamp

    invalidate_caches.cdcsync_lazy = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


def count_failed_retries(follower: str, error: str) -> None:
    """A batch whose tasks gave up on the sink: count their retries, which no BatchCounts brings back."""
    for attempts in FAILED_AFTER.findall(error):
        metrics.SINK_RETRIES.labels(follower).inc(int(attempts) - 1)


def _worker_follower(config_json: str, name: str, mappings: Mapping[str, TableMapping]) -> Follower:
    """This worker's follower: built on its first batch, reused after (connections, producer)."""
    shipped = json.loads(config_json)
    secrets = _worker_secrets(shipped, name)
    key = (config_json, name, hash(tuple(secrets)))  # a rotated secret builds a new follower
    follower = _followers.get(key)
    if follower is None:
        from cdcsync.sync.stream import build_follower

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


def shipped_config(config: Config, name: str) -> str:
    """What tasks receive: the redacted config and where follower ``name``'s secrets are (module docstring)."""
    from cdcsync.state import base_dir

    index = next(i for i, f in enumerate(config.followers) if f.name == name)
    binlog = {("sources", i, "password") for i, s in enumerate(config.sources) if s.kind != "postgres"}
    mine = [
        [list(p), v]
        for p, v in config.secrets().items()
        if p[0] == "kafka" or p[:2] == ("followers", index) or p in binlog  # binlog: the snapshot-row lookup
    ]
    path = base_dir(config) / "secrets" / f"{name}.json"
    if mine:
        write_private(path, json.dumps(mine))
    else:
        path.unlink(missing_ok=True)
    return json.dumps({"config": config.redacted(), "secrets_file": str(path), "secrets": bool(mine)})


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (0600, directory 0700), atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temp, path)


def _worker_secrets(shipped: dict[str, Any], name: str) -> list[tuple[tuple[str | int, ...], str]]:
    """This worker's secrets for follower ``name``: the driver's file, else this worker's environment."""
    if not shipped["secrets"]:
        return []
    file = Path(shipped["secrets_file"])
    if file.exists():
        return [(tuple(path), value) for path, value in json.loads(file.read_text())]
    found: list[tuple[tuple[str | int, ...], str]] = []
    config = shipped["config"]
    index = next(i for i, f in enumerate(config["followers"]) if f["name"] == name)
    for key in ("password", "api_key"):
        var = f"{ENV_PREFIX}FOLLOWER_{name.upper()}_{key.upper()}"
        if config["followers"][index].get(key) == MASK:
            if var not in os.environ:
                raise FatalError(
                    f"follower {name}: this Spark worker cannot read {file} and {var} is not set in its environment; "
                    "put the file on storage every executor sees or set the variable on each worker (docs/secrets.md)"
                )
            found.append((("followers", index, key), os.environ[var]))
    for section, prefix in (("properties", "KAFKA_PROPERTY_"), ("java_properties", "KAFKA_JAVA_PROPERTY_")):
        for prop, value in config["kafka"][section].items():
            var = ENV_PREFIX + prefix + prop.upper().replace(".", "_")
            if value == MASK and var in os.environ:
                found.append((("kafka", section, prop), os.environ[var]))
    return found
