"""pyarrow's file system for a Delta table path, set up as the Spark session's Hadoop settings set up Spark's.

A bootstrap or reindex spools a staged Delta table's rows as Parquet files
written by pyarrow (``delta_load``), while Spark reads them back and writes
the tables through Hadoop. Both must reach the same store with the same
credentials, so pyarrow takes its settings from the config's ``spark.conf``,
the map the session applies (``spark.hadoop.fs.s3a.*``): every process of a
fill has the config, none needs a Spark session for it.

=========================  ===========================================  ==========================
Delta table path           pyarrow file system                          from
=========================  ===========================================  ==========================
a local path, ``file:``    ``LocalFileSystem``
``s3a://``, ``s3://``      ``S3FileSystem``                             ``fs.s3a.endpoint``,
                                                                        ``endpoint.region``,
                                                                        ``access.key``,
                                                                        ``secret.key``,
                                                                        ``session.token``,
                                                                        ``path.style.access``,
                                                                        ``connection.ssl.enabled``,
                                                                        ``aws.credentials.provider``
                                                                        (anonymous only)
anything else (``abfss``,  none: the caller writes through Spark
``gs``, ``hdfs``)
=========================  ===========================================  ==========================

Each ``fs.s3a.<key>`` may be set for one bucket as Hadoop allows,
``fs.s3a.bucket.<bucket>.<key>``, which wins for that bucket. Without keys,
pyarrow looks for credentials where the AWS SDK does (``AWS_*`` variables,
``~/.aws``, the instance's role), as Hadoop's default providers do. Settings
given to Spark some other way (``spark-defaults.conf``, ``core-site.xml``)
do not reach pyarrow: set them in ``spark.conf`` (or ``CDCSYNC_SPARK_CONF_<KEY>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from pyarrow import fs

HADOOP = "spark.hadoop."
S3_SCHEMES = ("s3a", "s3")
S3A = "fs.s3a."
ANONYMOUS = "AnonymousAWSCredentialsProvider"  # Hadoop's provider class for public buckets
# With an endpoint and no region: what S3-compatible servers accept. Without an endpoint (AWS itself) the
# SDK finds the region as S3A's client does.
ENDPOINT_REGION = "us-east-1"


def s3_setting(conf: Mapping[str, str], bucket: str, key: str) -> str | None:
    """``fs.s3a.<key>`` for ``bucket`` from ``spark.conf``: its per-bucket value first (``fs.s3a.bucket.<b>.<key>``)."""
    for name in (f"{HADOOP}{S3A}bucket.{bucket}.{key}", f"{HADOOP}{S3A}{key}"):
        value = conf.get(name)
        if value is not None and value.strip():
            return value.strip()
    return None


def _true(value: str | None, default: bool) -> bool:
    return default if value is None else value.lower() == "true"


def s3_options(conf: Mapping[str, str], bucket: str) -> dict[str, Any]:
    """``S3FileSystem``'s arguments for ``bucket``, from the Hadoop settings in ``conf`` (module docstring)."""
    setting = partial(s3_setting, conf, bucket)
    options: dict[str, Any] = {}
    endpoint = setting("endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        ssl = _true(setting("connection.ssl.enabled"), True)  # Hadoop's rule for an endpoint without a scheme
        options["scheme"] = parts.scheme or ("https" if ssl else "http")
        options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        # Hadoop addresses buckets by host name (bucket.endpoint) unless told otherwise; pyarrow, given an
        # endpoint, by path unless told otherwise.
        options["force_virtual_addressing"] = not _true(setting("path.style.access"), False)
    region = setting("endpoint.region") or (ENDPOINT_REGION if endpoint else None)
    if region:
        options["region"] = region
    if ANONYMOUS in (setting("aws.credentials.provider") or ""):
        options["anonymous"] = True
    access, secret = setting("access.key"), setting("secret.key")
    if access and secret:
        options["access_key"], options["secret_key"] = access, secret
        token = setting("session.token")
        if token:
            options["session_token"] = token
    return options


def served(where: str) -> bool:
    """Whether pyarrow writes ``where`` as Spark does: a local path, ``file:``, ``s3a://`` or ``s3://``."""
    scheme = urlsplit(where).scheme if "://" in where or where.startswith("file:") else ""
    return scheme in ("", "file", *S3_SCHEMES)


def filesystem(where: str, conf: Mapping[str, str]) -> tuple[fs.FileSystem, str]:
    """pyarrow's file system for ``where`` (``served``), and ``where``'s path in it."""
    if not served(where):
        raise ValueError(f"{where}: pyarrow does not write such a path as Spark does (module docstring)")
    if "://" not in where and not where.startswith("file:"):
        return fs.LocalFileSystem(), where
    parts = urlsplit(where)
    if parts.scheme == "file":
        return fs.LocalFileSystem(), parts.path
    if not parts.netloc:
        raise ValueError(f"{where}: no bucket")
    return fs.S3FileSystem(**s3_options(conf, parts.netloc)), f"{parts.netloc}{parts.path}".rstrip("/")


def probe(where: str, conf: Mapping[str, str], timeout_s: float) -> tuple[bool, str]:
    """Whether the bucket of an ``s3a://`` path answers with these settings, and what was found."""
    parts = urlsplit(where)
    if parts.scheme not in S3_SCHEMES or not parts.netloc:
        return True, f"delta path {parts.scheme}://… not checked (remote storage)"
    options = s3_options(conf, parts.netloc) | {"connect_timeout": timeout_s, "request_timeout": timeout_s}
    store = fs.S3FileSystem(**options)
    shown = f"{parts.scheme}://{parts.netloc}"
    try:
        found = store.get_file_info(parts.netloc)
    except OSError as err:
        return False, f"delta path {shown}: {str(err)[:300]}"
    if found.type == fs.FileType.NotFound:
        return False, f"delta path {shown}: no such bucket"
    return True, f"delta path {shown} reachable"
