"""Rendering a source into the Debezium config that Kafka Connect receives."""

from __future__ import annotations

from cdcsync.config import Config
from cdcsync.connectors.render import redact, render
from cdcsync.connectors.topics import topic_specs


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


def test_table_topics_keep_changes_uncompacted_for_the_source_horizon() -> None:
    cfg = config(compaction_horizon_s=3600)
    specs = {s.name: s for s in topic_specs(cfg.sources[0])}
    table = next(s for name, s in specs.items() if name.startswith("src.") and "transaction" not in name)
    assert table.config["min.compaction.lag.ms"] == table.config["delete.retention.ms"] == "3600000"
    assert "min.compaction.lag.ms" not in specs["__debezium-heartbeat.src"].config  # heartbeats need no horizon
    assert config().sources[0].compaction_horizon_s == 7 * 24 * 3600
