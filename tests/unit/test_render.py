"""Rendering a source into the Debezium config that Kafka Connect receives."""

from __future__ import annotations

import re

from cdcsync.config import Config
from cdcsync.connectors.render import redact, render
from cdcsync.connectors.topics import partition_notes, topic_specs


def config(**source: object) -> Config:
    base = {
        "name": "src",
        "kind": "postgres",
        "port": 5432,
        "database": "app",
        "user": "u",
        "password": "pw",
        "tables": ["public.a_b", "public.c"],
    }
    return Config.model_validate({"sources": [{**base, **source}]})


def test_postgres_uses_pgoutput_named_slot_publication_and_anchored_table_list() -> None:
    cfg = config()
    rendered = render(cfg.sources[0], cfg)
    assert rendered["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert rendered["plugin.name"] == "pgoutput"
    assert (rendered["slot.name"], rendered["publication.name"]) == ("cdcsync_src", "cdcsync_src")
    assert rendered["table.include.list"] == r"public\.a_b,public\.c"
    assert rendered["topic.prefix"] == "src" and rendered["tombstones.on.delete"] == "true"
    assert int(rendered["heartbeat.interval.ms"]) > 0
    # Every template placeholder filled; the one reference left is the password's, for Connect (docs/secrets.md).
    assert all(isinstance(v, str) and "${" not in v for k, v in rendered.items() if k != "database.password")
    assert rendered["database.password"].startswith("${file:") and "pw" not in rendered["database.password"]


def test_mariadb_gets_server_id_schema_history_and_source_overrides_win() -> None:
    cfg = config(kind="mariadb", tables=["app.t"], debezium={"snapshot.mode": "no_data", "max.batch.size": "4096"})
    rendered = render(cfg.sources[0], cfg)
    assert rendered["connector.class"] == "io.debezium.connector.mariadb.MariaDbConnector"
    assert rendered["database.server.id"] == str(cfg.sources[0].server_id)
    assert rendered["schema.history.internal.kafka.topic"] == "_cdcsync_schema_history.src"
    assert rendered["schema.history.internal.kafka.bootstrap.servers"] == cfg.kafka.bootstrap_servers
    assert (rendered["snapshot.mode"], rendered["max.batch.size"]) == ("no_data", "4096")


def test_redact_masks_passwords_only() -> None:
    cfg = config()
    shown = redact(render(cfg.sources[0], cfg))
    assert shown["database.password"] == "********" and shown["database.user"] == "u"


def test_topics_are_compacted_and_schema_history_is_kept_forever() -> None:
    maria = config(kind="mariadb", tables=["app.t1", "app.t2"], topic_partitions=3)
    specs = {s.name: s for s in topic_specs(maria.sources[0])}
    assert specs["src.app.t1"].config["cleanup.policy"] == "compact" and specs["src.app.t1"].partitions == 3
    assert specs["__debezium-heartbeat.src"].config["cleanup.policy"] == "compact"
    history = specs["_cdcsync_schema_history.src"]
    assert (history.partitions, history.config["cleanup.policy"], history.config["retention.ms"]) == (1, "delete", "-1")
    assert "_cdcsync_schema_history.src" not in {s.name for s in topic_specs(config().sources[0])}


def test_a_table_topic_of_another_partition_count_is_reported_and_left_alone() -> None:
    specs = topic_specs(config(topic_partitions=4).sources[0])
    counts = {s.name: 1 for s in specs}  # every topic made before, with one partition
    notes = partition_notes(specs, counts)
    assert [n.split(":")[0] for n in notes] == ["topic src.public.a_b", "topic src.public.c"]  # tables only
    assert "has 1 partition(s), source src asks for 4" in notes[0] and "left as it is" in notes[0]
    assert partition_notes(specs, {**counts, "src.public.a_b": 4, "src.public.c": 4}) == []
    assert partition_notes(specs, {}) == []  # none there yet: created with 4
    more = partition_notes(topic_specs(config().sources[0]), {"src.public.c": 6})  # partitions added by hand
    assert len(more) == 1 and "has 6 partition(s), source src asks for 1" in more[0]


def test_table_topics_keep_changes_uncompacted_for_the_source_horizon() -> None:
    cfg = config(compaction_horizon_s=3600)
    specs = {s.name: s for s in topic_specs(cfg.sources[0])}
    table = next(s for name, s in specs.items() if name.startswith("src.") and "transaction" not in name)
    assert table.config["min.compaction.lag.ms"] == table.config["delete.retention.ms"] == "3600000"
    assert "min.compaction.lag.ms" not in specs["__debezium-heartbeat.src"].config  # heartbeats need no horizon
    assert config().sources[0].compaction_horizon_s == 7 * 24 * 3600


def test_every_connector_takes_signals_from_a_table_beside_its_first_and_that_topic_is_created() -> None:
    for kind, tables, expected in (("postgres", ["public.a_b"], "public.cdcsync_signal_src"),
                                   ("mariadb", ["app.t", "other.u"], "app.cdcsync_signal_src")):  # fmt: skip
        cfg = config(kind=kind, tables=tables)
        rendered = render(cfg.sources[0], cfg)
        assert (rendered["signal.data.collection"], rendered["signal.enabled.channels"]) == (expected, "source")
        assert f"src.{expected}" in {s.name for s in topic_specs(cfg.sources[0])}
    mariadb = config(kind="mariadb", tables=["app.t"])
    # Every table's DDL in the history: a table added later is known (connectors.signals.unknown_schemas).
    assert render(mariadb.sources[0], mariadb)["schema.history.internal.store.only.captured.tables.ddl"] == "false"


def test_added_tables_are_those_the_running_connector_does_not_capture() -> None:
    from cdcsync.connectors.signals import added_tables, unknown_schemas

    cfg = config(tables=["public.a_b", "public.c", "public.new"])
    source = cfg.sources[0]
    assert added_tables(source, None) == []  # a new connector snapshots everything anyway
    current = {"table.include.list": r"public\.a_b,public\.c"}
    assert [str(t) for t in added_tables(source, current)] == ["public.new"]
    assert unknown_schemas(source, current, added_tables(source, current)) == []  # Postgres reads the catalog

    maria = config(kind="mariadb", tables=["app.t", "app.new", "other.x"]).sources[0]
    running = {"table.include.list": r"app\.t", "database.include.list": "app",
               "schema.history.internal.store.only.captured.tables.ddl": "false"}  # fmt: skip
    (problem,) = unknown_schemas(maria, running, added_tables(maria, running))
    assert "other.x" in problem and "app.new" not in problem and "DELETE /connectors/src" in problem
    older = {**running, "schema.history.internal.store.only.captured.tables.ddl": "true"}
    (problem,) = unknown_schemas(maria, older, added_tables(maria, older))
    assert "app.new, other.x" in problem and "keeps the DDL of its captured tables only" in problem


def test_every_connector_sets_its_converters_so_a_worker_at_connects_defaults_works() -> None:
    """A worker left at Connect's defaults wraps values in a schema envelope unless the connector says otherwise."""
    for cfg in (config(), config(kind="mariadb", tables=["app.t"])):
        rendered = render(cfg.sources[0], cfg)
        for side in ("key", "value"):
            assert rendered[f"{side}.converter"] == "org.apache.kafka.connect.json.JsonConverter"
            assert rendered[f"{side}.converter.schemas.enable"] == "false"


def test_postgres_publishes_partitions_under_their_root_and_names_its_placeholder() -> None:
    cfg = config()
    rendered = render(cfg.sources[0], cfg)
    assert rendered["publish.via.partition.root"] == "true"
    assert rendered["unavailable.value.placeholder"] == "__debezium_unavailable_value"  # what sync.mapping refuses


def test_debezium_numbers_and_booleans_are_taken_as_connect_stores_them() -> None:
    cfg = config(debezium={"snapshot.fetch.size": 10240, "provide.transaction.metadata": False, "x.ratio": 0.5})
    rendered = render(cfg.sources[0], cfg)
    assert rendered["snapshot.fetch.size"] == "10240"
    assert rendered["provide.transaction.metadata"] == "false"
    assert rendered["x.ratio"] == "0.5"


def test_mariadb_skips_ddl_it_cannot_parse_only_where_it_names_no_captured_table() -> None:
    """Debezium's own DDL filters stay; ours is the last regex, matched whole, case-insensitively, as Java does."""
    cfg = config(kind="mariadb", tables=["app.orders", "app.ok"])
    patterns = render(cfg.sources[0], cfg)["internal.schema.history.internal.ddl.filter"].split(",")
    assert "SAVEPOINT .*" in patterns and "FLUSH RELAY LOGS.*" in patterns
    ours = re.compile(patterns[-1], re.IGNORECASE | re.DOTALL)
    skipped = [
        "CREATE TABLE hosts (id int PRIMARY KEY, addr INET6)",
        "CREATE TABLE `orders_archive` (a inet4)",  # another table whose name holds a captured one's
        "create table h (\n a\n Inet6\n)",
    ]
    parsed = [
        "ALTER TABLE app.orders ADD COLUMN addr INET6",  # a captured table: it must stop capture, not be skipped
        "ALTER TABLE `ok` ADD x inet4",
        "CREATE TABLE t (a varchar(39) DEFAULT INET6_NTOA(1))",  # the functions are not the types
        "CREATE TABLE t (a varchar(39))",
    ]
    assert [bool(ours.fullmatch(sql)) for sql in skipped + parsed] == [True] * 3 + [False] * 4
