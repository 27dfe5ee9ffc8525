"""Every setting from the environment by one rule; a variable that sets nothing is an error, never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from cdcsync.config import Config
from cdcsync.config import env as config_env
from cdcsync.config.file import environment_config, load_config
from cdcsync.errors import ConfigError

SOURCE = {"name": "pg_main", "kind": "postgres", "port": 5432, "database": "app", "user": "u", "password": "p"}
FOLLOWER = {"name": "search", "kind": "elasticsearch", "url": "http://127.0.0.1:9200"}


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def leaves(model: type[BaseModel], path: str) -> set[str]:
    """Every setting's path, entries of sources and followers written ``[0]``: what variables must reach."""
    found = set()
    for name, field in model.model_fields.items():
        inner = config_env._model_in(field.annotation)
        if name in ("origin", "state_dir") or (path.endswith("]") and name == "name"):
            continue
        if name in ("sources", "followers"):
            found |= leaves(config_env._model_in(field.annotation.__args__[0]), f"{name}[0]")  # type: ignore[arg-type]
        elif inner is not None:
            found |= leaves(inner, f"{path}.{name}" if path else name)
        else:
            found.add(f"{path}.{name}" if path else name)
    return found


def test_every_setting_has_a_variable() -> None:
    named = {"sources": [{"name": "pg_main"}], "followers": [{"name": "search"}]}
    reached = {path for _, path in config_env.variables(Config, named)}
    assert reached == leaves(Config, "")
    assert ("CDCSYNC_SPARK_DRIVER_MEMORY", "spark.driver_memory") in config_env.variables(Config, named)
    assert ("CDCSYNC_FOLLOWER_SEARCH_VERIFY_ROWS_PER_S", "followers[0].verify.rows_per_s") in config_env.variables(
        Config, named
    )


def test_process_settings_come_from_the_file_and_the_environment_wins(tmp_path: Path) -> None:
    doc = {
        "sources": [SOURCE],
        "followers": [FOLLOWER],
        "spark": {"driver_memory": "3g", "conf": {"spark.sql.shuffle.partitions": 8}},
        "delta": {"tables_at_once": 1},
    }
    env = {
        "CDCSYNC_SPARK_DRIVER_MEMORY": "4g",
        "CDCSYNC_SPARK_CONF_SPARK_HADOOP_FS_S3A_ENDPOINT": "http://127.0.0.1:8333",
        "CDCSYNC_DELTA_AUTO_COMPACT": "false",
        "CDCSYNC_METRICS_PORT": "0",
        "CDCSYNC_FOLLOWER_SEARCH_VERIFY_ROWS_PER_S": "50",
        "CDCSYNC_SOURCE_PG_MAIN_DEBEZIUM_SNAPSHOT_FETCH_SIZE": "10240",
        "CDCSYNC_SOURCE_PG_MAIN_TABLES": "[public.orders, sales.items]",
        "CDCSYNC_CHAOS_RATE": "1000",  # not a setting, and said to be none
    }
    cfg = load_config(write(tmp_path, doc), env=env)
    assert cfg.spark.driver_memory == "4g" and cfg.delta.tables_at_once == 1 and not cfg.delta.auto_compact
    assert cfg.spark.conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:8333",
    }
    assert cfg.metrics.port == 0 and cfg.followers[0].verify.rows_per_s == 50
    assert cfg.sources[0].debezium == {"snapshot.fetch.size": "10240"}
    assert [str(t) for t in cfg.sources[0].tables] == ["public.orders", "sales.items"]
    assert cfg.origin["spark.driver_memory"] == "environment variable CDCSYNC_SPARK_DRIVER_MEMORY"
    assert "spark.delta" not in cfg.origin and "delta.tables_at_once" not in cfg.origin  # the file's


def test_a_variable_that_sets_nothing_is_an_error_naming_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, {"sources": [SOURCE]})
    with pytest.raises(ConfigError) as err:
        load_config(path, env={"CDCSYNC_KAFKA_BOOTSTRAP": "k:9092", "CDCSYNC_SOURCE_PG_MAN_PASSWORD": "x"})
    text = str(err.value)
    assert "CDCSYNC_KAFKA_BOOTSTRAP: no setting has this variable" in text
    assert "did you mean CDCSYNC_KAFKA_BOOTSTRAP_SERVERS?" in text
    assert "did you mean CDCSYNC_SOURCE_PG_MAIN_PASSWORD?" in text
    # A follower's variable needs the follower in the file: it adds no entry.
    with pytest.raises(ConfigError, match="CDCSYNC_FOLLOWER_CACHE_URL: no setting"):
        load_config(path, env={"CDCSYNC_FOLLOWER_CACHE_URL": "redis://x"})


def test_bad_values_are_named_with_their_variable(tmp_path: Path) -> None:
    path = write(tmp_path, {"sources": [SOURCE]})
    env = {
        "CDCSYNC_DELTA_TABLES_AT_ONCE": "0",
        "CDCSYNC_SOURCE_PG_MAIN_TABLES": "[public.orders",
        "CDCSYNC_DELTA_REPLACED_FILE_RETENTION": "1 hour",
        "CDCSYNC_SPARK_CONF_FS_S3A_ENDPOINT": "x",
    }
    with pytest.raises(ConfigError) as err:
        load_config(path, env=env)
    text = str(err.value)
    assert "delta.tables_at_once: Input should be greater than or equal to 1" in text
    assert "[from environment variable CDCSYNC_DELTA_TABLES_AT_ONCE]" in text
    assert "CDCSYNC_SOURCE_PG_MAIN_TABLES: not valid YAML" in text
    assert "'1 hour' is not a Delta interval" in text
    assert "'fs.s3a.endpoint' is not a Spark property" in text


def test_switches_and_secrets_of_the_spark_section(tmp_path: Path) -> None:
    doc = {"spark": {"class_archive": True, "conf": {"spark.hadoop.fs.s3a.secret.key": "s3cr3t"}}}
    cfg = load_config(write(tmp_path, doc), env={"CDCSYNC_SPARK_ADAPTIVE": "1"})
    assert cfg.spark.class_archive == "on" and cfg.spark.adaptive
    assert cfg.redacted()["spark"]["conf"]["spark.hadoop.fs.s3a.secret.key"] == "**********"
    assert "s3cr3t" not in str(cfg.redacted())
    assert environment_config({"CDCSYNC_SPARK_CLASS_ARCHIVE": "0"}).spark.class_archive == "off"


def test_the_state_directory_variable_is_a_default_the_file_overrides(tmp_path: Path) -> None:
    """CDCSYNC_STATE_DIR is where state goes when a config names no state_dir: one machine's configs keep theirs."""
    source = {**SOURCE, "tables": ["public.orders"]}
    own = load_config(write(tmp_path, {"sources": [source], "state_dir": "/srv/a"}), env={"CDCSYNC_STATE_DIR": "/x"})
    assert own.state_dir == "/srv/a"
    assert load_config(write(tmp_path, {"sources": [source]}), env={"CDCSYNC_STATE_DIR": "/x"}).state_dir is None


def test_the_environment_alone_makes_a_config_and_leaves_entries_it_cannot_place() -> None:
    cfg = environment_config({"CDCSYNC_SPARK_MASTER": "local[1]", "CDCSYNC_SOURCE_PG_MAIN_PORT": "1"})
    assert cfg.spark.master == "local[1]" and cfg.sources == []
    with pytest.raises(ConfigError, match="spark.driver_memory|spark.log_level"):
        environment_config({"CDCSYNC_SPARK_LOG_LEVEL": "LOUD"})
