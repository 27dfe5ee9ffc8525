"""A warehouse in a bucket: a Delta follower whose ``path`` is ``s3a://`` on the stack's S3 server (SeaweedFS).

One scenario, end to end, against the real server: a bootstrap that loads
through a spool of Parquet files in the bucket, written by pyarrow in the
fill's other processes with the settings of ``spark.conf``; changes streamed
by ``cdcsync run --once``; a reindex; ``verify`` clean after each. The S3 key
pair is in ``spark.conf`` and must never be shown: not by ``cdcsync config``,
nor in the daemon's effective-config line, nor anywhere else a command prints.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyarrow import fs

from cdcsync.config import Config
from cdcsync.connectors.apply import apply
from cdcsync.connectors.topics import delete_topics
from cdcsync.snapshot import parallel, replay
from cdcsync.snapshot.bootstrap import bootstrap_from_topics
from cdcsync.state import base_dir
from cdcsync.sync.build import build_follower
from cdcsync.sync.delta_upkeep import Upkeep
from cdcsync.sync.sinks import build_sink, object_store
from cdcsync.sync.sinks.delta import DeltaSink
from cdcsync.sync.stream import checkpoint_dir
from cdcsync.sync.verify.compare import verify_follower
from tests.support import ENV, drop_capture, execute, read_topic, source_dict, uid, wait_streaming

BUCKET = ENV["S3_BUCKET"]
S3A = {
    "spark.hadoop.fs.s3a.endpoint": f"http://127.0.0.1:{ENV['S3_PORT']}",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.access.key": ENV["S3_ACCESS_KEY"],
    "spark.hadoop.fs.s3a.secret.key": ENV["S3_SECRET_KEY"],
}
ROWS = 300
# `cdcsync` with its INFO log on stderr, as `cdcsync run` has it: the sink's lines say how a fill was written.
LOGGED = (
    "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr); "
    "sys.argv[0] = 'cdcsync'; from cdcsync.cli import main; main()"
)


@pytest.fixture(scope="module", autouse=True)
def s3_stopped_after() -> Iterator[None]:
    """pyarrow's S3 support, started in this process by the bucket's listings and the fill's spool, is stopped
    after the module: the AWS SDK's threads make a later fork unsafe, and the test run forks a child for each
    Spark driver it launches."""
    yield
    fs.finalize_s3()


def bucket() -> fs.FileSystem:
    store, _ = object_store.filesystem(f"s3a://{BUCKET}", S3A)
    return store


def objects(prefix: str) -> list[str]:
    found = bucket().get_file_info(fs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True))
    return sorted(f.path for f in found if f.type == fs.FileType.File)


class Warehouse:
    """The scenario: its source table, config (as a file too), and every output a command printed."""

    def __init__(self, tmp: Path) -> None:
        self.tag = f"s3{uid()}"
        self.table = f"objstore_{self.tag}"
        self.raw: dict[str, Any] = {
            "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
            "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
            "sources": [source_dict("postgres", f"{self.tag}_pg", [f"public.{self.table}"])],
            "followers": [
                {
                    "name": "warehouse",
                    "kind": "delta",
                    "path": f"s3a://{BUCKET}/{self.tag}",
                    "dead_letter_topic": f"dlq.{self.tag}.warehouse",
                }
            ],
            "spark": {"driver_memory": "1g", "conf": S3A},
            "state_dir": str(tmp),
        }
        self.config = Config.model_validate(self.raw)
        self.path = tmp / "cdcsync.yaml"
        self.path.write_text(yaml.safe_dump(self.raw))
        self.outputs: list[tuple[str, str]] = []
        source = self.config.sources[0]
        self.topic = source.topic(source.tables[0])

    def cli(self, *args: str, logged: bool = False, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        head = [sys.executable, "-c", LOGGED] if logged else [sys.executable, "-m", "cdcsync"]
        done = subprocess.run(
            [*head, "--config", str(self.path), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "CDCSYNC_METRICS_PORT": "0"},
        )
        self.outputs += [(f"{' '.join(args)} stdout", done.stdout), (f"{' '.join(args)} stderr", done.stderr)]
        return done

    def wait_for(self, ident: int, name: str) -> None:
        """Until the topic holds the row ``ident`` named ``name`` (everything committed before it is there too)."""
        read_topic(
            self.topic,
            lambda rs: any(
                r.key == {"id": ident} and ((r.value or {}).get("after") or {}).get("name") == name for r in rs
            ),
            timeout=180,
        )

    def verified(self) -> list[dict[str, Any]]:
        """``cdcsync verify``'s reports, each clean."""
        checked = self.cli("verify", "warehouse", "--json")
        assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
        reports = json.loads(checked.stdout)
        assert reports and all(r["clean"] for r in reports), reports
        return reports


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[Warehouse]:
    w = Warehouse(tmp_path)
    values = ", ".join(f"({i}, 'row {i}', {i})" for i in range(1, ROWS + 1))
    execute(
        "postgres",
        f"CREATE TABLE {w.table} (id INT PRIMARY KEY, name TEXT, n INT)",
        f"INSERT INTO {w.table} VALUES {values}",
    )
    try:
        apply(w.config)
        wait_streaming(w.config)
        w.wait_for(ROWS, f"row {ROWS}")
        yield w
    finally:
        drop_capture(w.config)
        delete_topics(w.config, [f.dlq_topic for f in w.config.followers])
        execute("postgres", f"DROP TABLE IF EXISTS {w.table}")
        bucket().delete_dir_contents(f"{BUCKET}/{w.tag}", missing_dir_ok=True)


@pytest.fixture
def spark(warehouse: Warehouse) -> Iterator[Any]:
    """A session with the scenario's s3a settings, in a driver JVM of its own.

    A session made before (another module's) is stopped, as its Hadoop configuration is fixed when it starts; and
    so is the JVM it ran in: Hadoop finds S3A's classes on the class path a driver JVM started with, and a JVM
    started without S3A's jars (a session whose config reaches no object storage) never finds them, as a
    `cdcsync` command, one session per process, never meets.
    """
    from pyspark import SparkContext

    from cdcsync.spark import spark_session

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        jvm = getattr(gateway, "proc", None)
        gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None  # the next session launches a JVM of its own
        if jvm is not None:
            jvm.terminate()
            jvm.wait(60)
    session = spark_session("cdcsync-test-object-storage", config=warehouse.config)
    yield session
    session.stop()


def test_a_warehouse_in_a_bucket_bootstraps_streams_reindexes_and_verifies(
    warehouse: Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    w, cfg = warehouse, warehouse.config.followers[0]
    # `cdcsync status`'s probe reaches the bucket with the settings, and says so when they are wrong.
    assert DeltaSink.probe(w.config, cfg, 5) == (True, f"delta path s3a://{BUCKET} reachable")
    wrong = Config.model_validate({**w.raw, "spark": {"conf": {**S3A, "spark.hadoop.fs.s3a.secret.key": "wrong"}}})
    reached, said = DeltaSink.probe(wrong, wrong.followers[0], 5)
    assert not reached and "ACCESS_DENIED" in said, said
    # The printed config masks the key pair.
    for args in (("config",), ("config", "--json")):
        shown = w.cli(*args)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count("**********") >= 2, shown.stdout

    # Bootstrap, the log replayed in two processes, as a large one would be: each writes its share of the rows
    # into the spool in the bucket, with the settings it got with the config; then one Spark write publishes.
    monkeypatch.setattr(parallel, "MIN_RECORDS", 0)
    monkeypatch.setattr(parallel, "PROCESSES", 2)
    monkeypatch.setattr(replay, "SLICE_RECORDS", 100)
    spooled: list[str] = []
    publish = DeltaSink.publish

    def listed_then_published(sink: DeltaSink) -> None:
        spooled.extend(o for o in objects(w.tag) if "__staging__spool/" in o)
        publish(sink)

    monkeypatch.setattr(DeltaSink, "publish", listed_then_published)
    follower = build_follower(w.config, cfg, spark)
    with caplog.at_level(logging.INFO, logger="cdcsync"):
        summary = bootstrap_from_topics(w.config, cfg, follower, checkpoint_dir(w.config, cfg), base_dir(w.config))
    assert summary.records >= ROWS and summary.dead_lettered == 0
    assert re.search(rf"publishing_from=s3a://{BUCKET}/{w.tag}/\S+__staging__spool files=[1-9]", caplog.text)
    assert "spool=none" not in caplog.text, "the fill fell back to MERGEs"
    writers = {int(re.sub(r".*/part-(\d+)-.*", r"\1", o)) for o in spooled if o.endswith(".parquet")}
    assert writers - {os.getpid()}, f"no spool file of another process in the bucket: {spooled}"
    left = objects(w.tag)
    assert not [o for o in left if "__staging" in o], f"the staged table or its spool outlived the publish: {left}"
    assert any(re.search(rf"/{w.table}/_delta_log/\d+\.json$", o) for o in left), left
    # A reindex killed before its switch leaves a staged table, made on the path the publish just removed (whose
    # emptied directories the server keeps a while); the reindex below removes it and makes it again at once.
    follower.sink.stage(list(follower.mappings.values()))
    assert any(re.search(rf"/{w.table}__staging/_delta_log/\d+\.json$", o) for o in objects(w.tag))
    follower.sink.close()

    # Changes, streamed by `cdcsync run --once`: its effective-config line masks the keys too.
    execute(
        "postgres",
        f"UPDATE {w.table} SET name = 'changed', n = n + 1000 WHERE id <= 20",
        f"DELETE FROM {w.table} WHERE id BETWEEN 21 AND 30",
        f"INSERT INTO {w.table} VALUES ({ROWS + 1}, 'late', 0)",
    )
    w.wait_for(ROWS + 1, "late")
    ran = w.cli("run", "--once", "warehouse")
    assert ran.returncode == 0, ran.stderr[-3000:]
    effective = [line for line in ran.stderr.splitlines() if "effective config" in line]
    assert effective and "**********" in effective[0], ran.stderr[-3000:]
    # verify, here in this process's session (one JVM less to start), reads the bucket as the command does.
    (report,) = verify_follower(w.config, cfg, build_sink(w.config, cfg, spark))
    assert report.clean and report.source_rows == report.store_rows == ROWS - 10 + 1, report.as_dict()

    # A reindex: a new generation filled as a load through the bucket, then readers switched to it.
    execute("postgres", f"UPDATE {w.table} SET name = 'after' WHERE id = 1")
    w.wait_for(1, "after")
    rebuilt = w.cli("reindex", "warehouse", logged=True)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert re.search(rf"publishing_from=s3a://{BUCKET}/{w.tag}/\S+__staging__spool files=[1-9]", rebuilt.stderr)
    assert "spool=none" not in rebuilt.stderr, "the reindex fell back to MERGEs"
    (last,) = w.verified()
    assert last["source_rows"] == last["store_rows"] == ROWS - 10 + 1, last

    # The daemon's upkeep in the bucket: OPTIMIZE, VACUUM LITE, the sizes (no disk figure off local disk).
    size = Upkeep(w.config, [cfg], spark).tick()["warehouse", f"public.{w.table}"]
    assert size.files >= 1 and size.bytes > 0 and size.disk_bytes is None, size
    (tidied,) = verify_follower(w.config, cfg, build_sink(w.config, cfg, spark))
    assert tidied.clean and tidied.store_rows == ROWS - 10 + 1, tidied.as_dict()

    leaks = [what for what, text in w.outputs for key in (ENV["S3_ACCESS_KEY"], ENV["S3_SECRET_KEY"]) if key in text]
    assert not leaks, f"the S3 keys appear in: {', '.join(leaks)}"
