"""The Spark driver JVM's class archive: Spark's classes loaded from a file instead of from its jars.

A JVM started cold spends seconds reading, verifying and linking thousands of
classes: a Spark session took ~6 s to start here, and its first job (a
bootstrap's first JDBC read) another ~3.5 s, before the same work took 0.3 s.
Every ``cdcsync bootstrap``, ``reindex``, ``verify`` and daemon start pays it.
Java's class data sharing (CDS) keeps those classes, already parsed and
verified, in an archive the JVM maps at start. One is made by a short training
run (``build``: ``make install`` calls ``python -m cdcsync.class_archive``)
whose JVM writes every class it loaded at exit (``-XX:ArchiveClassesAtExit``);
``spark_session(class_archive=True)`` then starts the driver with
``-XX:SharedArchiveFile``.

Only commands whose JVM mostly starts are started from it: a bootstrap or
reindex of Elasticsearch or Redis ``--from source``, where Spark only reads
pieces over JDBC. Measured here, a warm driver started from the archive ran
the same Spark jobs 8-28 % slower, and the daemon's freshness was worse with
it (docs/performance.md), so ``cdcsync run`` and everything Spark-heavy start
without.

An archive fits one JVM build and one class path only. Its name is a
fingerprint of both (the java binary and its release file, pyspark's jars and
the connector jars: names, sizes, times), so a JDK, pyspark or jar upgrade
looks for a new one and runs without until ``build`` makes it; the JVM also
checks and, on a mismatch, starts as it would without (its CDS messages are
off, so that costs time, not noise). ``spark.class_archive`` ``on`` or
``off``: every command with or without it. docs/performance.md ("Spark's
classes from an archive").
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cdcsync.driver import QUIET, archive_path, driver_java_options
from cdcsync.spark import spark_session

BUILD_TIMEOUT_S = 300


def build(force: bool = False) -> Path:
    """Make the archive for this JVM and class path (a training run in a child process) unless it exists.

    The child's JVM writes the archive when it exits, after the child itself has
    ended: the child reports the JVM's pid and this waits for it. Written
    beside the final name and renamed, so a reader never maps half an archive;
    archives of other fingerprints (an earlier JDK or jar set) are removed.
    The child runs with the archive off (``_train``).
    """
    path = archive_path()
    if path is None:
        raise RuntimeError("no java found (JAVA_HOME or the PATH): Spark cannot start")
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    done = subprocess.run(
        [sys.executable, "-m", "cdcsync.class_archive", "--train", str(partial)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the training run failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid) or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the training run's JVM (pid {pid}) wrote no class archive at {partial}")
    partial.replace(path)
    for other in path.parent.glob("*.jsa"):  # not another build's .partial: it may still be written
        if other != path:
            other.unlink(missing_ok=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # PermissionError: alive, another user's
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _train(archive: Path) -> None:
    """The training run: what a bootstrap and a follower load first, then exit so the JVM writes the archive.

    Needs no running service: a session, rows through Arrow both ways (as a
    bootstrap's pieces and a follower's batches go), and a Delta table written
    and MERGEd into (the delta sink).
    """
    os.environ["CDCSYNC_SPARK_CLASS_ARCHIVE"] = "off"  # an archive is made from a JVM that maps none
    options = f"{driver_java_options()} -XX:ArchiveClassesAtExit={archive} {QUIET}"
    spark = spark_session("cdcsync-class-archive", conf={"spark.driver.extraJavaOptions": options})
    rows = spark.range(2000).selectExpr(
        "id",
        "cast(id as string) as name",
        "cast(id / 10 as decimal(10, 2)) as price",
        "current_timestamp() as updated_at",
    )
    table = rows.toArrow()
    with tempfile.TemporaryDirectory(prefix="cdcsync-class-archive-") as tmp:
        spark.createDataFrame(table).write.format("delta").save(tmp)
        changes = spark.createDataFrame(table.slice(0, 500))
        changes.createOrReplaceTempView("changes")
        spark.sql(
            f"MERGE INTO delta.`{tmp}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        spark.read.format("delta").load(tmp).count()
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    spark.stop()
    print(pid, flush=True)  # the last word on stdout: build() waits for this JVM to finish writing


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m cdcsync.class_archive",
        description="Make the Spark driver's class archive for this JVM and class path (make install runs this).",
    )
    parser.add_argument("--force", action="store_true", help="make it again even if it exists")
    parser.add_argument("--exists", action="store_true", help="only say whether it exists: exit 0 if so, else 1")
    parser.add_argument("--train", metavar="PATH", help=argparse.SUPPRESS)  # the child's side of build()
    args = parser.parse_args(argv)
    if args.train:
        _train(Path(args.train))
        return 0
    if args.exists:
        path = archive_path()
        return 0 if path is not None and path.is_file() else 1
    started = time.monotonic()
    try:
        path = build(force=args.force)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
        print(f"class archive: not made ({err}); Spark starts without it, ~3 s slower", file=sys.stderr)
        return 1
    print(f"class archive: {path} ({path.stat().st_size / 2**20:.0f} MiB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
