"""Spark's Python daemon for the followers' workers: it prepares once what every worker it forks would redo.

Spark starts each Python worker by forking it from one daemon process
(``pyspark.daemon``), and keeps its workers for further tasks until none has
had one for a minute. A follower that falls behind runs more tasks at once than
it ran while it kept up (``sync.batching.task_options``), so a backlog, a
follower's first batch and every batch after a quiet minute start workers
afresh. Each fresh worker then paid, on its first two tasks, ~1.3 s of CPU on
this machine:

- re-reading the directories of the zip archives on its path
  (``sync.executors.reread_zips_only_when_changed`` spares later tasks, not
  the first one);
- importing cdcsync, its sinks' clients and pyarrow while unpickling the
  batch function and building its follower, and pandas, which Spark's worker
  imports once the task's answer went back.

And pandas' objects, imported after the worker froze its heap
(``sync.follower.tune_gc``), were walked by the ``gc.collect()`` Spark's
worker runs after every task: 30-40 ms of CPU per task. Forked from here: at
a steady 1k changes/s the Python workers used 0.09-0.10 of a core against
0.23-0.24; in a burst of 100k changes 68-70 µs of CPU per change against
116; the first change after a quiet minute was seen after at most 1.7 s
against 3.0 (docs/performance.md, "Python workers forked warm").

This module does both in the daemon, before it forks, then runs Spark's own
daemon loop: a forked worker shares the imported modules and the archives'
directories. It builds no client and starts no thread (a fork copies only the
thread that forks), and freezes what it loaded out of the garbage collector's
walks, as ``sync.follower.tune_gc`` does in a worker.

Spark runs it as ``python -m cdcsync.sync.worker_daemon pyspark.worker``
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
    from cdcsync.sync.executors import reread_zips_only_when_changed

    reread_zips_only_when_changed()
    importlib.invalidate_caches()  # reads each archive's directory now; a forked worker's tasks skip unchanged ones
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()


def main() -> None:
    prepare()
    from pyspark import daemon  # reads the worker module from sys.argv[1], as under ``-m pyspark.daemon``

    daemon.manager()


if __name__ == "__main__":
    main()
