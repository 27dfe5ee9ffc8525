"""Delta log checkpoints written beside the delta sink's batches, not inside them.

A Delta table's state is its log: a JSON file per commit, and now and then a
checkpoint, the whole state in one Parquet file, so that a reader starts from
it instead of replaying every commit. Delta writes that checkpoint inside the
commit whose version is a multiple of the table's ``delta.checkpointInterval``
(10 by default), so the MERGE that reaches it returns only once the state is
written: in the daemon those batches took ~40 % longer than their neighbours,
and they are the delta follower's freshness tail (docs/performance.md, "Delta: log
checkpoints beside the batch").

cdcsync's Delta tables carry an interval of ``INTERVAL`` (1,000) instead, a
fallback for writers other than cdcsync, and the sink asks a ``Checkpoints``
to write one every ``EVERY`` versions on its own thread, once the batch that
reached it has returned. A checkpoint is not a commit: MERGEs go on while it is
written, and a reader uses it once its ``_last_checkpoint`` pointer is
written. A table whose interval an operator chose keeps Delta's own checkpoints.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from cdcsync.spark import CHECKPOINT_INTERVAL as INTERVAL

log = logging.getLogger(__name__)

PROPERTY = "delta.checkpointInterval"
DEFAULT = "spark.databricks.delta.properties.defaults.checkpointInterval"  # for new tables (cdcsync.spark)
EVERY = 10  # versions between the checkpoints written here (Delta's own default interval)
CLOSE_WAIT_S = 60.0  # how long closing the sink waits for a checkpoint being written


class Checkpoints:
    """Writes a checkpoint of each watched table every ``EVERY`` versions, one at a time, on a thread of its own."""

    def __init__(self, spark: Any, every: int = EVERY) -> None:
        self._spark, self._every = spark, every
        self._last: dict[str, int] = {}  # path -> the version of its last checkpoint here (or when watched)
        self._pending: dict[str, Future[None]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # one batch's tables are MERGEd at once (delta_writers), from two threads

    def watch(self, path: str) -> None:
        """Checkpoint ``path`` from now on (a table whose interval is ``INTERVAL``: Delta's own come that rarely)."""
        self._last[path] = self._log(path).unsafeVolatileSnapshot().version()

    def committed(self, path: str) -> None:
        """A commit to ``path`` returned: start its checkpoint if ``EVERY`` versions passed and none is running."""
        if path not in self._last or not self._idle(path):
            return
        version = self._log(path).unsafeVolatileSnapshot().version()
        with self._lock:
            if version - self._last.get(path, version) < self._every or not self._idle(path):
                return
            self._last[path] = version
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-checkpoint")
            self._pending[path] = self._pool.submit(self._write, path, version)

    def forget(self, path: str) -> None:
        """Stop checkpointing ``path`` (about to be removed), once the one being written is done."""
        with self._lock:
            pending = self._pending.pop(path, None)
            self._last.pop(path, None)
        self._wait(pending)

    def close(self) -> None:
        """Let the checkpoints being written finish, then the thread go."""
        for path in list(self._pending):
            self.forget(path)
        with self._lock:
            self._last.clear()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _idle(self, path: str) -> bool:
        pending = self._pending.get(path)
        return pending is None or pending.done()

    def _wait(self, pending: Future[None] | None) -> None:
        if pending is not None:
            try:
                pending.result(timeout=CLOSE_WAIT_S)
            except TimeoutError:
                log.warning("delta_checkpoint still being written after %.0f s; not waited for", CLOSE_WAIT_S)

    def _log(self, path: str) -> Any:
        jvm = self._spark.sparkContext._jvm
        return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self._spark._jsparkSession, path)

    def _write(self, path: str, version: int) -> None:
        started = time.monotonic()
        try:
            delta_log = self._log(path)
            snapshot = delta_log.unsafeVolatileSnapshot()
            # Delta catches a failed checkpoint itself (the commit stands) and logs it in the JVM's log only.
            delta_log.checkpoint(snapshot, self._spark.sparkContext._jvm.scala.Option.empty())
            written = self._written(path, snapshot.version())
        except Exception as err:  # never the batch's failure: the commits stand, and readers replay them
            log.warning("delta_checkpoint table=%s version=%d failed: %s; Delta writes one itself every %s versions",
                        path, version, str(err).splitlines()[0][:300], INTERVAL)  # fmt: skip
            return
        if not written:
            log.warning("delta_checkpoint table=%s version=%d not written (Delta's reason is in the JVM's log at "
                        "WARN); Delta writes one itself every %s versions", path, version, INTERVAL)  # fmt: skip
            return
        log.info("delta_checkpoint table=%s version=%d seconds=%.2f", path, version, time.monotonic() - started)

    def _written(self, path: str, version: int) -> bool:
        jvm = self._spark.sparkContext._jvm
        pattern = jvm.org.apache.hadoop.fs.Path(f"{path}/_delta_log/{version:020d}.checkpoint*.parquet")
        found = pattern.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration()).globStatus(pattern)
        return found is not None and len(found) > 0
