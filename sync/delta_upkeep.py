"""The Delta tables' upkeep in the daemon: OPTIMIZE, then VACUUM LITE, each table every ``delta.upkeep_every_s``.

A table MERGEd every few seconds gains small files (each MERGE writes a few)
and deletion vectors (rows a MERGE replaced, marked in their old files), and
keeps every file a commit replaced until a VACUUM removes it: without upkeep
its disk grows without end (``bench.delta_upkeep``). Each pass, per table
(and its history table):

- ``OPTIMIZE`` rewrites small files into large ones, and files whose rows are
  mostly replaced (Delta's ``optimize.maxDeletedRowsRatio``) without them. It
  holds the table's writer lock (``delta_writers.one_writer``): a follower's
  MERGE into that table waits for it, as it waits for a reindex's publish.
- ``VACUUM ... LITE RETAIN <delta.retention_hours> HOURS`` deletes the files
  that commits older than the window removed, as the commits' own ``remove``
  actions date them. Not a full VACUUM: that one decides by the table
  state's entries of replaced files, which cdcsync keeps for an hour only
  (``delta.replaced_file_retention``, docs/performance.md), and by each file's
  time of writing, so it could delete a file written before the window and
  replaced within it, which a version of the window still reads. LITE never
  does. A table whose log no longer reaches its last VACUUM (one not run for
  the log's 30 days) is logged with the full VACUUM an operator may run.

Then each table's live files and bytes (``DESCRIBE DETAIL``) and, on a local
path, its bytes on disk (log and replaced files included) are exported:
``cdcsync_delta_table_files``, ``cdcsync_delta_table_bytes``,
``cdcsync_delta_table_disk_bytes``, by follower and table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from cdcsync import metrics
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import RetryableError
from cdcsync.sync.sinks.delta import table_root
from cdcsync.sync.sinks.delta_values import quote
from cdcsync.sync.sinks.delta_writers import one_writer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("cdcsync.upkeep")

MIN_EVERY_S = 10.0


@dataclass
class TableSize:
    files: int
    bytes: int
    disk_bytes: int | None  # None: not a local path


def disk_bytes(path: str) -> int | None:
    """Bytes of every file under a local table's directory; None for a remote path."""
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        return None
    root = Path(parsed.path if parsed.scheme else path)
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def tidy(spark: SparkSession, path: str, retention_hours: int) -> TableSize | None:
    """OPTIMIZE and VACUUM LITE one table; its size after, or None when ``path`` holds no Delta table."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    table = f"delta.{quote(path)}"
    with one_writer(path):
        spark.sql(f"OPTIMIZE {table}").collect()
    try:
        spark.sql(f"VACUUM {table} LITE RETAIN {retention_hours} HOURS").collect()
    except Exception as err:  # the log no longer reaches the last VACUUM: only a full one could
        if "LITE" not in str(err) and "FULL" not in str(err):
            raise
        log.warning(
            "table=%s not vacuumed: %s; `VACUUM %s RETAIN %d HOURS` (a full VACUUM) would, once no version of the "
            "last %d hours is read", path, str(err).splitlines()[0], table, retention_hours, retention_hours,
        )  # fmt: skip
    detail = spark.sql(f"DESCRIBE DETAIL {table}").select("numFiles", "sizeInBytes").collect()[0]
    return TableSize(int(detail[0]), int(detail[1]), disk_bytes(path))


class Upkeep:
    """``tick``: one upkeep pass over every table of each delta follower."""

    def __init__(self, config: Config, followers: list[FollowerConfig], spark: SparkSession | None) -> None:
        self.config, self.spark = config, spark
        self.followers = [f for f in followers if f.spark_tables]

    @property
    def every_s(self) -> float:
        return max(MIN_EVERY_S, self.config.delta.upkeep_every_s)

    @property
    def enabled(self) -> bool:
        return bool(self.followers) and self.config.delta.upkeep_every_s > 0 and self.spark is not None

    def tables(self, follower: FollowerConfig) -> list[tuple[str, str]]:
        """(metric label, path) of each of the follower's tables, history tables included."""
        root = table_root(self.config, follower)
        found = []
        for source, table in self.config.followed_tables(follower):
            path = f"{root}/{follower.target_for(source.name, table)}"
            found.append((str(table), path))
            if follower.history:
                found.append((f"{table}__history", f"{path}__history"))
        return found

    def tick(self) -> dict[tuple[str, str], TableSize]:
        """Tidy every table; ``(follower, table) -> its size after``. A table that fails fails alone."""
        sizes: dict[tuple[str, str], TableSize] = {}
        failed: list[str] = []
        for follower in self.followers:
            for label, path in self.tables(follower):
                started = time.monotonic()
                try:
                    size = tidy(self._session, path, self.config.delta.retention_hours)
                except Exception as err:  # ours or Spark's (a commit conflict, a missing file): this table's alone
                    failed.append(f"follower {follower.name} table {label}: {str(err).splitlines()[0]}")
                    continue
                if size is None:  # not written yet
                    continue
                sizes[follower.name, label] = size
                metrics.record_table_size(follower.name, label, size.files, size.bytes, size.disk_bytes)
                log.info(
                    "follower=%s table=%s files=%d bytes=%d disk_bytes=%s took_s=%.1f", follower.name, label,
                    size.files, size.bytes, size.disk_bytes, time.monotonic() - started,
                )  # fmt: skip
        if failed:
            raise RetryableError("; ".join(failed))
        return sizes

    @property
    def _session(self) -> Any:
        assert self.spark is not None
        return self.spark
