"""The fork server of the followers' Python workers: it prepares once what every worker it forks would redo.

Spark starts each Python worker by forking it from one process, its fork
server (``pyspark.daemon``), and keeps its workers for further tasks until none has
had one for a minute. A follower that falls behind runs more tasks at once than
it ran while it kept up (``sync.batching.task_options``), so a backlog, a
follower's first batch and every batch after a quiet minute start workers
afresh. Each fresh worker then paid, on its first two tasks, ~1.3 s of CPU on
this machine:

- re-reading the directories of the zip archives on its path
  (``reread_zips_only_when_changed`` spares later tasks, not
  the first one);
- importing cdcsync, its sinks' clients and pyarrow while unpickling the
  batch function and building its follower, and pandas, which Spark's worker
  imports once the task's answer went back.

And pandas' objects, imported after the worker froze its heap
(``sync.build.tune_gc``), were walked by the ``gc.collect()`` Spark's
worker runs after every task: 30-40 ms of CPU per task. Forked from here: at
a steady 1k changes/s the Python workers used 0.09-0.10 of a core against
0.23-0.24; in a burst of 100k changes 68-70 µs of CPU per change against
116; the first change after a quiet minute was seen after at most 1.7 s
against 3.0 (docs/performance.md, "Python workers forked warm").

This module does both in the fork server, before it forks, then runs Spark's
own fork loop: a forked worker shares the imported modules and the archives'
directories. It builds no client and starts no thread (a fork copies only the
thread that forks), and freezes what it loaded out of the garbage collector's
walks, as ``sync.build.tune_gc`` does in a worker.

Spark runs it as ``python -m cdcsync.sync.fork_server pyspark.worker``
(``spark.python.daemon.module``, set by ``cdcsync.spark``).
"""

from __future__ import annotations

import gc
import importlib
import os

# What a follower's task imports: the batch function's module and what building a follower and its sinks
# needs, and pandas, which Spark's worker imports after a task's first Arrow batch went back (~0.4 s of CPU).
# pyspark.daemon itself imports pyspark.worker.
PRELOAD = (
    "pyarrow",
    "pandas",
    "cdcsync.sync.executors",
    "cdcsync.sync.stream",
    "cdcsync.sync.sinks.elasticsearch",
    "cdcsync.sync.sinks.redis",
)


def prepare() -> None:
    """Read the path's archives once, import what tasks import, and freeze it all out of the collector."""
    # numpy's BLAS would start its threads on import, and a fork copies only the forking thread; nothing here
    # does linear algebra.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    reread_zips_only_when_changed()
    importlib.invalidate_caches()  # reads each archive's directory now; a forked worker's tasks skip unchanged ones
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()


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
    not even once by a worker forked from cdcsync's fork server, which read the
    archives before it forked (``prepare``). Tasks still call it, for workers
    forked by Spark's own (``spark.worker_daemon: pyspark.daemon``).
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


def main() -> None:
    prepare()
    from pyspark import daemon  # reads the worker module from sys.argv[1], as under ``-m pyspark.daemon``

    daemon.manager()


if __name__ == "__main__":
    main()
