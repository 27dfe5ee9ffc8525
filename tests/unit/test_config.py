"""Config: validation messages name the field, the value's origin and what is valid; env overrides win."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdcsync.config.file import load_config
from cdcsync.errors import ConfigError

SOURCE = {
    "name": "pg_main",
    "kind": "postgres",
    "port": 5432,
    "database": "app",
    "user": "u",
    "password": "hunter2",
    "tables": ["customers", "sales.orders"],
}


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_defaults_and_table_qualification(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, {"sources": [SOURCE]}), env={})
    source = cfg.sources[0]
    assert [str(t) for t in source.tables] == ["public.customers", "sales.orders"]
    assert (source.slot, source.publication) == ("cdcsync_pg_main", "cdcsync_pg_main")
    assert source.topic(source.tables[1]) == "pg_main.sales.orders"
    maria = load_config(write(tmp_path, {"sources": [{**SOURCE, "kind": "mariadb", "name": "m"}]}), env={}).sources[0]
    assert str(maria.tables[0]) == "app.customers" and maria.server_id is not None and maria.slot is None


def test_environment_overrides_connection_settings_and_is_named_in_errors(tmp_path: Path) -> None:
    path = write(tmp_path, {"sources": [SOURCE]})
    env = {
        "CDCSYNC_SOURCE_PG_MAIN_HOST": "db.internal",
        "CDCSYNC_SOURCE_PG_MAIN_PASSWORD": "from-env",
        "CDCSYNC_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
    }
    cfg = load_config(path, env=env)
    assert cfg.sources[0].host == "db.internal"
    assert cfg.sources[0].password.get_secret_value() == "from-env"
    assert cfg.kafka.bootstrap_servers == "k:9092"
    with pytest.raises(ConfigError) as err:
        load_config(path, env={"CDCSYNC_SOURCE_PG_MAIN_PORT": "not-a-port"})
    assert "sources[0].port" in str(err.value)
    assert "environment variable CDCSYNC_SOURCE_PG_MAIN_PORT" in str(err.value)


def test_every_problem_is_listed_with_its_path(tmp_path: Path) -> None:
    no_tables = {**SOURCE, "name": "pg_none", "tables": []}
    bad = {"sources": [{**SOURCE, "kind": "oracle"}, {**SOURCE, "name": "Has Space", "typo": 1}, no_tables]}
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, bad), env={})
    text = "\n".join(err.value.problems)
    for expected in (
        "sources[0].kind: Input should be 'postgres' or 'mariadb'",
        "sources[2]: Value error, name the tables to capture: tables, schemas or include",
        "sources[1].name: String should match pattern",
        "sources[1].typo: Extra inputs are not permitted",
    ):
        assert expected in text
    assert "hunter2" not in str(err.value)


def test_duplicate_source_names_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="repeated: pg_main"):
        load_config(write(tmp_path, {"sources": [SOURCE, SOURCE]}), env={})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml", env={})
    (tmp_path / "broken.yaml").write_text("sources: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml", env={})


def test_redacted_config_hides_secrets(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, {"sources": [SOURCE]}), env={})
    assert "hunter2" not in str(cfg.redacted())


def test_kind_mysql_is_refused_with_the_reason_and_the_alternative(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"sources": [{**SOURCE, "kind": "mysql"}]}), env={})
    [problem] = err.value.problems
    assert problem.startswith("sources[0].kind: Value error, kind mysql is not supported yet")
    assert "server_uuid:N" in problem and "kind: mariadb" in problem


def test_two_sources_with_the_same_table_in_one_follower_are_refused_at_load_with_advice_that_works(
    tmp_path: Path,
) -> None:
    other = {**SOURCE, "name": "pg_eu"}
    follower = {"name": "search", "kind": "elasticsearch", "url": "http://127.0.0.1:9200"}
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"sources": [SOURCE, other], "followers": [follower]}), env={})
    message = str(err.value)
    assert "pg_main.public.customers and pg_eu.public.customers both map to target 'customers'" in message
    assert "'pg_eu.public.customers'" in message
    # The advice, followed: a mapping keyed by source.namespace.table renames that source's table alone.
    both = {**follower, "mappings": {"pg_eu.public.customers": {"target": "eu_customers"}, "sales.orders": {}}}
    with pytest.raises(ConfigError, match="pg_main.sales.orders and pg_eu.sales.orders"):
        load_config(write(tmp_path, {"sources": [SOURCE, other], "followers": [both]}), env={})
    fixed = {
        **follower,
        "mappings": {"pg_eu.public.customers": {"target": "eu_customers"}, "pg_eu.sales.orders": {"target": "eu_o"}},
    }
    cfg = load_config(write(tmp_path, {"sources": [SOURCE, other], "followers": [fixed]}), env={})
    search, main, eu = cfg.followers[0], cfg.sources[0], cfg.sources[1]
    assert search.mapping_for(main.name, main.tables[0]) is None
    assert search.mapping_for(eu.name, eu.tables[0]).target == "eu_customers"  # type: ignore[union-attr]
    # A follower that takes one of the two tables only is fine as it is.
    one = {**follower, "tables": ["pg_main.public.customers", "pg_eu.sales.orders"]}
    load_config(write(tmp_path, {"sources": [SOURCE, other], "followers": [one]}), env={})


def test_any_name_the_database_accepts_is_captured_into_debeziums_topic_and_a_target_every_store_takes(
    tmp_path: Path,
) -> None:
    from cdcsync.connectors.render import render
    from cdcsync.names import debezium_id, default_target, topic_name

    odd = {"namespace": "Sales Dept.2024", "table": 'Order "Items" ü'}
    cfg = load_config(write(tmp_path, {"sources": [{**SOURCE, "tables": ["customers", odd]}]}), env={})
    source = cfg.sources[0]
    # Debezium's rule: each UTF-16 unit outside [A-Za-z0-9._-] becomes '_' (a character past U+FFFF: two).
    assert source.topic(source.tables[1]) == "pg_main.Sales_Dept.2024.Order__Items___"
    assert topic_name("s", "a", "😀") == "s.a.__"
    assert default_target('Order "Items" ü') == "order__items___"
    assert default_target("_Ünï") == "n_" and default_target("ü") == "table"
    assert debezium_id("Sales Dept.2024", 'Order "Items" ü') == '"Sales Dept.2024"."Order ""Items"" ü"'
    assert debezium_id("public", "customers") == "public.customers"
    rendered = render(source, cfg)
    assert rendered["table.include.list"] == r'public\.customers,Sales\ Dept\.2024\.Order\ "Items"\ ü'


def test_two_tables_debezium_would_write_into_one_topic_are_refused(tmp_path: Path) -> None:
    tables = [{"namespace": "public", "table": "order items"}, {"namespace": "public", "table": "order_items"}]
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"sources": [{**SOURCE, "tables": tables}]}), env={})
    assert "would both be captured into topic 'pg_main.public.order_items'" in str(err.value)


def test_a_short_table_name_with_a_space_or_a_dot_points_to_the_long_form(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"sources": [{**SOURCE, "tables": ["sales.order items"]}]}), env={})
    assert "{namespace: ..., table: ...}" in str(err.value)


def test_property_maps_take_yaml_numbers_and_booleans_as_the_text_debezium_and_kafka_read(tmp_path: Path) -> None:
    source = {**SOURCE, "debezium": {"snapshot.fetch.size": 10240, "provide.transaction.metadata": True}}
    kafka = {"properties": {"socket.timeout.ms": 30000, "enable.idempotence": False}, "java_properties": {"x.y": 1.5}}
    cfg = load_config(write(tmp_path, {"sources": [source], "kafka": kafka}), env={})
    assert cfg.sources[0].debezium == {"snapshot.fetch.size": "10240", "provide.transaction.metadata": "true"}
    assert cfg.kafka.properties == {"socket.timeout.ms": "30000", "enable.idempotence": "false"}
    assert cfg.kafka.java_properties == {"x.y": "1.5"}
    with pytest.raises(ConfigError, match="snapshot.fetch.size"):
        load_config(write(tmp_path, {"sources": [{**SOURCE, "debezium": {"snapshot.fetch.size": [1]}}]}), env={})
