"""A Spark driver started after ``python -m cdcsync.class_archive`` loads Spark's classes from the archive.

Real JVMs: the training run's writes the archive at its exit, and a second
driver, started by ``spark_session`` as a bootstrap from the source starts one, logs where
each class came from (``-Xlog:class+load``). A class loaded from its jar there
means the archive is not mapped: every command pays the cold start again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdcsync.driver import connector_jars

PROBE = """
from cdcsync.spark import spark_session
spark = spark_session("cdcsync-class-archive-probe", class_archive=True)
assert spark.range(10).toArrow().num_rows == 10
spark.stop()
"""


def test_a_driver_maps_the_archive_built_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdcsync import class_archive
    from cdcsync.driver import DIRECTORY, archive_path

    jars = connector_jars()[0].parent
    monkeypatch.setenv("CDCSYNC_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CDCSYNC_SPARK_JARS", str(jars))
    monkeypatch.delenv("CDCSYNC_SPARK_CLASS_ARCHIVE", raising=False)
    stale = tmp_path / "state" / DIRECTORY / "0123456789abcdef.jsa"  # an earlier JDK's
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")

    path = class_archive.build()

    assert path == archive_path() and path.stat().st_size > 50 * 2**20
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "stale archives or a partial one left"
    log = tmp_path / "classes.log"
    env = {**os.environ, "CDCSYNC_SPARK_JAVA_OPTIONS": f"-Xlog:class+load=info:file={log}"}
    subprocess.run([sys.executable, "-c", PROBE], env=env, check=True, timeout=300)
    sources = {
        line.split(" source: ")[0].split()[-1]: line.split(" source: ")[1]
        for line in log.read_text().splitlines()
        if " source: " in line
    }
    for name in ("org.apache.spark.SparkContext", "org.apache.spark.sql.SparkSession"):
        assert sources.get(name) == "shared objects file (top)", f"{name} loaded from {sources.get(name)}"
    assert class_archive.build() == path  # made once: a second build finds it
