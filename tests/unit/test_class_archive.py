"""Which class archive a Spark driver starts from, and when none: plain data, no JVM (the real one is in
tests/integration/test_class_archive.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "delta-spark_2.13-4.0.0.jar"):
        (jars / name).write_bytes(b"jar")
    monkeypatch.setenv("CDCSYNC_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CDCSYNC_SPARK_JARS", str(jars))
    monkeypatch.delenv("CDCSYNC_SPARK_CLASS_ARCHIVE", raising=False)
    monkeypatch.delenv("CDCSYNC_SPARK_JAVA_OPTIONS", raising=False)
    return tmp_path


def _made(path: Path | None) -> Path:
    assert path is not None, "no java on this machine"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    return path


def test_no_archive_no_option(state: Path) -> None:
    from cdcsync.driver import java_options

    assert java_options() == ""


def test_the_archive_of_this_jvm_and_class_path_is_used(state: Path) -> None:
    from cdcsync.driver import QUIET, archive_path, java_options

    path = _made(archive_path())
    assert path.parent == state / "state" / "spark-classes"
    assert java_options() == f"-XX:SharedArchiveFile={path} {QUIET}"


@pytest.mark.parametrize("value", ["off", "false", "0"])
def test_the_archive_can_be_turned_off(state: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from cdcsync.driver import archive_path, java_options

    _made(archive_path())
    monkeypatch.setenv("CDCSYNC_SPARK_CLASS_ARCHIVE", value)
    assert java_options() == ""


def test_a_command_that_does_not_want_it_starts_without_unless_turned_on(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdcsync.driver import archive_path, java_options

    path = _made(archive_path())
    assert java_options(wanted=False) == ""
    monkeypatch.setenv("CDCSYNC_SPARK_CLASS_ARCHIVE", "on")
    assert str(path) in java_options(wanted=False)


def test_another_jar_set_looks_for_another_archive(state: Path) -> None:
    """An archive made for other jars is not used: the JVM would reject it at every start."""
    from cdcsync.driver import archive_path, java_options

    first = _made(archive_path())
    jar = state / "jars" / "delta-spark_2.13-4.0.0.jar"
    jar.write_bytes(b"a rebuilt jar")
    os.utime(jar, ns=(1, 1))
    rebuilt = archive_path()
    assert rebuilt != first
    assert java_options() == ""
    (state / "jars" / "postgresql-42.7.4.jar").write_bytes(b"jar")
    assert archive_path() not in (first, rebuilt)


def test_driver_options_log4j_then_archive_then_the_operators(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdcsync.driver import LOG4J2, archive_path, driver_java_options

    path = _made(archive_path())
    monkeypatch.setenv("CDCSYNC_SPARK_JAVA_OPTIONS", "-XX:+HeapDumpOnOutOfMemoryError")
    options = driver_java_options(class_archive=True).split()
    assert options[0] == f"-Dlog4j2.configurationFile={LOG4J2}"
    assert options[1] == f"-XX:SharedArchiveFile={path}"
    assert options[-1] == "-XX:+HeapDumpOnOutOfMemoryError"
    # The default (the daemon, verify, the Delta follower's commands): no archive, a faster warm JVM.
    assert driver_java_options().split() == [options[0], options[-1]]
