"""pyarrow's file system for a Delta table path, built from the Spark session's Hadoop settings (no server)."""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from pyarrow import fs

from cdcsync.config import Config
from cdcsync.sync.sinks import delta_load, object_store
from cdcsync.sync.sinks.delta import DeltaSink

S3A = "spark.hadoop.fs.s3a."
LOCAL_S3 = {
    f"{S3A}endpoint": "http://127.0.0.1:18333",
    f"{S3A}access.key": "cdcsync",
    f"{S3A}secret.key": "s3cr3t",
    f"{S3A}path.style.access": "true",
}


def arguments(store: fs.FileSystem) -> dict[str, object]:
    """What an S3FileSystem was built with (its pickled form: pyarrow shows no other way)."""
    _rebuild, (kwargs,) = store.__reduce__()
    return dict(kwargs)


def test_the_local_stacks_settings_give_path_style_http_with_the_keys() -> None:
    assert object_store.s3_options(LOCAL_S3, "lake") == {
        "scheme": "http",
        "endpoint_override": "127.0.0.1:18333",
        "force_virtual_addressing": False,
        "region": object_store.ENDPOINT_REGION,
        "access_key": "cdcsync",
        "secret_key": "s3cr3t",
    }


def test_an_endpoint_without_a_scheme_follows_hadoops_ssl_setting_and_host_style_addressing() -> None:
    conf = {f"{S3A}endpoint": "minio.internal:9000", f"{S3A}endpoint.region": "eu-west-1"}
    options = object_store.s3_options(conf, "b")
    assert options["scheme"] == "https" and options["endpoint_override"] == "minio.internal:9000"
    assert options["force_virtual_addressing"] is True  # Hadoop's default: bucket.endpoint
    assert options["region"] == "eu-west-1"
    conf[f"{S3A}connection.ssl.enabled"] = "false"
    assert object_store.s3_options(conf, "b")["scheme"] == "http"


def test_without_settings_the_aws_sdk_finds_region_and_credentials_itself() -> None:
    assert object_store.s3_options({}, "lake") == {}
    only_access = {f"{S3A}access.key": "id-without-secret"}
    assert "access_key" not in object_store.s3_options(only_access, "lake")


def test_a_per_bucket_setting_wins_for_its_bucket_only() -> None:
    conf = {**LOCAL_S3, f"{S3A}bucket.other.endpoint": "https://s3.eu-west-1.amazonaws.com/"}
    assert object_store.s3_options(conf, "lake")["endpoint_override"] == "127.0.0.1:18333"
    other = object_store.s3_options(conf, "other")
    assert (other["scheme"], other["endpoint_override"]) == ("https", "s3.eu-west-1.amazonaws.com")


def test_session_token_and_anonymous_access() -> None:
    conf = {**LOCAL_S3, f"{S3A}session.token": "tok"}
    assert object_store.s3_options(conf, "lake")["session_token"] == "tok"
    public = {f"{S3A}aws.credentials.provider": "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"}
    assert object_store.s3_options(public, "lake") == {"anonymous": True}


def build_in_this_process(where: str) -> tuple[str, str, dict[str, object]]:
    """The file system ``filesystem`` gives for ``where``: its kind, the path in it, its arguments."""
    store, path = object_store.filesystem(where, LOCAL_S3)
    return type(store).__name__, path, arguments(store)


def test_an_s3a_path_gets_an_s3_file_system_built_from_those_settings() -> None:
    # Built in a spawned process: pyarrow starts the AWS SDK for it, whose threads make every later fork of the
    # process that started it unsafe, and the test run forks (each Spark driver it launches).
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        kind, path, built_with = pool.submit(
            build_in_this_process, "s3a://lake/warehouse/items__staging__spool/"
        ).result(timeout=120)
    assert kind == "S3FileSystem"
    assert path == "lake/warehouse/items__staging__spool"
    built = built_with
    assert built["endpoint_override"] == "127.0.0.1:18333" and built["scheme"] == "http"
    assert built["access_key"] == "cdcsync" and built["region"] == object_store.ENDPOINT_REGION
    assert built["force_virtual_addressing"] is False


def test_local_paths_and_other_schemes(tmp_path: Path) -> None:
    for where in (str(tmp_path / "spool"), f"file://{tmp_path}/spool"):
        store, path = object_store.filesystem(where, LOCAL_S3)
        assert isinstance(store, fs.LocalFileSystem) and path == str(tmp_path / "spool")
    for where in ("abfss://c@account.dfs.core.windows.net/lake", "gs://lake/w", "hdfs://nn/lake"):
        assert not object_store.served(where)
        assert delta_load.spool_at(where, LOCAL_S3) is None  # the staged table is MERGEd instead
        with pytest.raises(ValueError, match="does not write"):
            object_store.filesystem(where, LOCAL_S3)


def test_the_delta_sink_and_its_fill_processes_take_the_settings_from_spark_conf() -> None:
    config = Config.model_validate(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:19092"},
            "spark": {"conf": LOCAL_S3},
            "followers": [{"name": "warehouse", "kind": "delta", "path": "s3a://lake/warehouse"}],
        }
    )
    sink = DeltaSink.from_config(config, config.followers[0], None)  # a fill's other process: no session
    assert sink.storage == LOCAL_S3
    # What a fill's other processes receive (snapshot.parallel pickles the config) still holds them.
    again = pickle.loads(pickle.dumps(config))
    assert DeltaSink.from_config(again, again.followers[0], None).storage == LOCAL_S3
