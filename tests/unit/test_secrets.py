"""Secrets stay out of what is printed, what Connect stores and what Spark tasks receive (docs/secrets.md)."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark import cloudpickle

from cdcsync.config import Config
from cdcsync.config.file import load_config
from cdcsync.connectors.render import properties_text, render, secret_properties
from cdcsync.errors import ConfigError
from cdcsync.sync import executors
from cdcsync.sync.shipped import shipped_config, worker_secrets

SECRET = f"s3cr3t-{uuid.uuid4().hex}"


def raw_config(state: Path) -> dict[str, Any]:
    return {
        "state_dir": str(state),
        "kafka": {"properties": {"security.protocol": "SASL_SSL", "sasl.password": SECRET}},
        "sources": [
            {
                "name": "pg",
                "kind": "postgres",
                "port": 5432,
                "database": "d",
                "user": "u",
                "password": SECRET,
                "tables": ["public.t"],
                "debezium": {"database.sslpassword": SECRET, "snapshot.fetch.size": "100"},
            },
            {
                "name": "maria",  # its password reaches tasks for the snapshot-row lookup, never in clear
                "kind": "mariadb",
                "port": 3306,
                "database": "d",
                "user": "u",
                "password": SECRET,
                "tables": ["d.t"],
            },
        ],
        "followers": [
            {"name": "search", "kind": "elasticsearch", "url": f"http://elastic:{SECRET}@127.0.0.1:9200"},
            {"name": "cache", "kind": "redis", "url": f"redis://:{SECRET}@127.0.0.1:6379/0"},
            {"name": "keyed", "kind": "elasticsearch", "url": "https://es:9200", "api_key": SECRET},
        ],
    }


def test_the_config_shipped_to_executors_holds_no_secret(tmp_path: Path) -> None:
    plain = raw_config(tmp_path)  # secrets in the fields the config always had, first
    del plain["kafka"], plain["followers"][2]
    for raw in (plain, raw_config(tmp_path)):
        assert_not_shipped(Config.model_validate(raw))


def assert_not_shipped(config: Config) -> None:
    for name in [f.name for f in config.followers]:
        # What Spark pickles for each task of a batch (the batch function itself runs on the driver).
        task = executors.task_function(shipped_config(config, name), name, True, {}, 0)
        assert task.__closure__, "the task closes over nothing?"
        pickled = cloudpickle.dumps(task)
        assert SECRET.encode() not in pickled, f"follower {name}: the secret is in what tasks receive"
        assert SECRET.encode("utf-16-le") not in pickled


def test_a_task_gets_its_followers_secrets_back_from_a_private_file(tmp_path: Path) -> None:
    config = Config.model_validate(raw_config(tmp_path))
    shipped = json.loads(shipped_config(config, "cache"))
    file = Path(shipped["secrets_file"])
    assert stat.S_IMODE(file.stat().st_mode) == 0o600 and stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    rebuilt = Config.with_secrets(shipped["config"], dict(worker_secrets(shipped, "cache")))
    cache = rebuilt.follower("cache")
    assert cache.password is not None and cache.password.get_secret_value() == SECRET
    assert rebuilt.kafka.properties["sasl.password"] == SECRET
    assert rebuilt.source("maria").password.get_secret_value() == SECRET  # the snapshot-row lookup's
    search = rebuilt.follower("search")  # another follower's secret is not in this follower's file
    assert search.password is not None and search.password.get_secret_value() != SECRET


def test_a_task_without_the_file_reads_the_environment_or_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Config.model_validate(raw_config(tmp_path))
    shipped = json.loads(shipped_config(config, "keyed"))
    Path(shipped["secrets_file"]).unlink()  # an executor on another machine
    with pytest.raises(Exception, match="CDCSYNC_FOLLOWER_KEYED_API_KEY"):
        worker_secrets(shipped, "keyed")
    monkeypatch.setenv("CDCSYNC_FOLLOWER_KEYED_API_KEY", "from-env")
    assert dict(worker_secrets(shipped, "keyed"))[("followers", 2, "api_key")] == "from-env"


def test_url_credentials_move_out_of_the_url_and_every_secret_is_redacted(tmp_path: Path) -> None:
    config = Config.model_validate(raw_config(tmp_path))
    search = config.follower("search")
    assert search.url == "http://127.0.0.1:9200" and search.username == "elastic"
    assert search.password is not None and search.password.get_secret_value() == SECRET
    shown = json.dumps(config.redacted())
    assert SECRET not in shown
    assert "SASL_SSL" in shown and '"snapshot.fetch.size": "100"' in shown  # only secrets are masked


def test_follower_settings_come_from_cdcsync_variables(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"followers": [{"name": "cache", "kind": "redis", "url": "redis://x:1/0"}]}))
    env = {
        "CDCSYNC_FOLLOWER_CACHE_URL": "rediss://redis.example:6380/0",
        "CDCSYNC_FOLLOWER_CACHE_USERNAME": "cdcsync",
        "CDCSYNC_FOLLOWER_CACHE_PASSWORD": SECRET,
        "CDCSYNC_KAFKA_PROPERTY_SASL_PASSWORD": SECRET,
    }
    config = load_config(path, env=env)
    cache = config.follower("cache")
    assert (cache.url, cache.username) == ("rediss://redis.example:6380/0", "cdcsync")
    assert cache.password is not None and cache.password.get_secret_value() == SECRET
    assert config.kafka.properties == {"sasl.password": SECRET}
    assert config.origin["followers[0].password"] == "environment variable CDCSYNC_FOLLOWER_CACHE_PASSWORD"


@pytest.mark.parametrize(
    "change",
    [
        lambda raw: raw["sources"][0].update(pasword=raw["sources"][0].pop("password")),  # a misspelt key
        lambda raw: raw["followers"][1].update(url=f"redis://:{SECRET}@127.0.0.1:notaport/0"),
        lambda raw: raw["followers"][0].update(url=f"ftp://u:{SECRET}@host/"),
        lambda raw: raw["followers"][2].update(password=SECRET, username="u"),  # api key and basic auth
        lambda raw: raw["followers"][1].update(tls_ca="/no/such/ca.pem"),
        lambda raw: raw["sources"][0]["debezium"].update({"database.ssl.password": [SECRET]}),  # not a scalar
    ],
)
def test_config_errors_never_show_the_secret(tmp_path: Path, change: Any) -> None:
    raw = raw_config(tmp_path)
    change(raw)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert SECRET not in str(err.value)


def test_connector_config_refers_to_a_file_connect_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCSYNC_STATE_DIR", str(tmp_path / "machine"))
    config = Config.model_validate(raw_config(tmp_path))
    source = config.sources[0]
    rendered = render(source, config)
    assert SECRET not in json.dumps(rendered)
    # The machine's state directory, where the local Connect may read; not the deployment's state_dir.
    file = tmp_path / "machine" / "connect-secrets" / "pg.properties"
    assert rendered["database.password"] == f"${{file:{file}:database.password}}"
    assert rendered["database.sslpassword"] == f"${{file:{file}:database.sslpassword}}"
    assert secret_properties(source, config) == {"database.password": SECRET, "database.sslpassword": SECRET}
    inside = Config.model_validate({**raw_config(tmp_path), "connect": {"secrets_dir_in_connect": "/run/s"}})
    assert render(inside.sources[0], inside)["database.password"] == "${file:/run/s/pg.properties:database.password}"


def test_a_reference_the_user_wrote_is_left_alone(tmp_path: Path) -> None:
    raw = raw_config(tmp_path)
    raw["sources"][0]["debezium"]["database.sslpassword"] = "${vault:secret/pg:sslpassword}"
    config = Config.model_validate(raw)
    assert render(config.sources[0], config)["database.sslpassword"] == "${vault:secret/pg:sslpassword}"


def test_properties_text_escapes_what_java_would_misread() -> None:
    text = properties_text({"database.password": " a=b:c#d!e\\f\nnon-ascii é 😀"})
    assert text == "database.password=\\ a\\=b\\:c\\#d\\!e\\\\f\\nnon-ascii \\u00e9 \\ud83d\\ude00\n"


def test_apply_writes_the_secrets_file_owner_only(tmp_path: Path) -> None:
    from cdcsync.state import write_private

    path = tmp_path / "s" / "pg.properties"
    write_private(path, "k=v\n", to_dir_owner=True)
    assert path.read_text() == "k=v\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p.name != "pg.properties"], "a temporary file was left"
    assert os.stat(path).st_uid == os.stat(path.parent).st_uid
