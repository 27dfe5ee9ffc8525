"""What the Spark driver JVM starts with: its class path and its options.

- ``state_dir``: the stack's state directory, where the connector jars and the
  class archive live (the same rule as deploy/local/stack.py).
- ``connector_jars``: Spark's Kafka source and Delta Lake, resolved by Maven
  into ``<state>/lib/spark`` (deploy/local/pom.xml, profile ``spark``;
  ``spark.jars`` points elsewhere). Jars that pyspark already ships
  (Scala, slf4j, ...) are left out, so one copy of each class is loaded.
  Among them S3A for ``s3a://`` warehouses (``hadoop-aws`` and the AWS SDK
  bundle it is built on), which a session takes only when its config reaches
  object storage (``session_jars``).
- ``driver_java_options``: log4j's configuration, the class archive's option
  when the command wants it and one was made for this JVM and class path
  (``archive_path``; ``cdcsync.class_archive`` makes it), then
  ``spark.java_options``.

Each takes the config's ``spark`` section; without one, the settings the
environment gives (``CDCSYNC_SPARK_*``, ``cdcsync.config.env``).

Plain functions of the settings and the files: no JVM is started here, so
``cdcsync.spark`` (which starts one) and ``cdcsync.class_archive`` (which
trains one) both build on this module, and neither on the other's.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from cdcsync.errors import FatalError
from cdcsync.state import state_dir

if TYPE_CHECKING:
    from cdcsync.config.runtime import SparkSettings

LOG4J2 = Path(__file__).with_name("log4j2.properties")


def _or_environment(settings: SparkSettings | None) -> SparkSettings:
    from cdcsync.config.file import environment_config

    return settings if settings is not None else environment_config().spark


def _artifact(jar: Path) -> str:
    return re.sub(r"-\d[\w.]*$", "", jar.stem)


def connector_jars(settings: SparkSettings | None = None) -> list[Path]:
    import pyspark

    jars_dir = Path(_or_environment(settings).jars or state_dir() / "lib/spark")
    jars = sorted(jars_dir.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka") for j in jars) or not any(
        j.name.startswith("delta-spark") for j in jars
    ):
        raise FatalError(
            f"Spark's Kafka source and Delta jars are not in {jars_dir}; run `make install` "
            "(or set spark.jars, CDCSYNC_SPARK_JARS, to a directory holding them)"
        )
    bundled = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if _artifact(j) not in bundled]


# Jars that only Hadoop's S3A file system loads: hadoop-aws and the AWS SDK it is built on (~560 MB, nearly all of it
# the SDK). Spark copies each jar of spark.jars for its executors at every session's start (a local master's too:
# ~560 MB written, seconds more), and the SDK prints its own logging's notices on stderr once loaded, so a session
# takes them only when its config reaches object storage (``uses_s3a``).
FILESYSTEM_JARS = ("hadoop-aws", "bundle", "wildfly-openssl")


def uses_s3a(paths: list[str], conf: dict[str, str]) -> bool:
    """Whether a session with these Delta table paths and Spark properties reads or writes ``s3a://``."""
    return any(p.startswith("s3a://") for p in paths) or any(k.startswith("spark.hadoop.fs.s3a.") for k in conf)


def session_jars(jars: list[Path], s3a: bool) -> list[Path]:
    """``jars`` without the S3A ones unless ``s3a``."""
    return [j for j in jars if s3a or _artifact(j) not in FILESYSTEM_JARS]


DIRECTORY = "spark-classes"  # under the state directory
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a rejected archive is not worth a line in every command's log


def java_binary() -> Path | None:
    """The java pyspark's launcher runs: ``$JAVA_HOME/bin/java``, else the first on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def fingerprint(settings: SparkSettings | None = None) -> str | None:
    """What an archive depends on, hashed: the JVM build and every jar of the driver's class path."""
    import pyspark

    java = java_binary()
    if java is None:
        return None
    digest = hashlib.sha256(str(java).encode())
    release = java.parent.parent / "release"  # JAVA_VERSION and the build, in every JDK since 9
    digest.update(release.read_bytes() if release.exists() else b"")
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")) + connector_jars(settings)
    for jar in jars:
        stat = jar.stat()
        digest.update(f"{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_path(settings: SparkSettings | None = None) -> Path | None:
    """Where this JVM's and class path's archive is (whether or not it exists yet); None without java."""
    key = fingerprint(settings)
    return state_dir() / DIRECTORY / f"{key}.jsa" if key else None


def java_options(wanted: bool = True, settings: SparkSettings | None = None) -> str:
    """The driver's options to start from the archive; empty when there is none for this JVM or it is not wanted.

    ``wanted``: the command's own choice (``spark_session(class_archive=...)``);
    ``spark.class_archive`` ``on`` or ``off`` overrides it for every command.
    """
    settings = _or_environment(settings)
    if settings.class_archive != "auto":
        wanted = settings.class_archive == "on"
    if not wanted:
        return ""
    path = archive_path(settings)
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def driver_java_options(class_archive: bool = False, settings: SparkSettings | None = None) -> str:
    """The driver JVM's options: log4j's configuration, the class archive's, then ``spark.java_options``.

    Only errors from the JVM's first line on (cdcsync/log4j2.properties): no
    start-up notices in the log. With ``class_archive``, Spark's classes come
    from the archive made for this JVM, if there is one (``cdcsync.class_archive``):
    ~4 s less to start, but slower Spark jobs once warm.
    """
    settings = _or_environment(settings)
    options = [
        f"-Dlog4j2.configurationFile={LOG4J2}",
        java_options(class_archive, settings),
        settings.java_options,
    ]
    return " ".join(o for o in options if o)
