"""``cdcsync connectors delete``: a source's capture removed from Kafka Connect, the database and Kafka.

Real stack: a connector is registered and streaming, then deleted; afterwards
Connect lists no connector, Postgres holds no slot (which would keep WAL until
the disk fills) and no publication, the database no signal table, Kafka none
of the source's topics. A second run finds nothing and succeeds; a source a
follower still reads is refused with exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cdcsync.config import Config
from cdcsync.connectors.apply import apply, client_for
from cdcsync.connectors.topics import admin, existing_topics, topic_specs
from tests.support import ENV, config_for, execute, pg_connect, source_dict, uid, wait_streaming


def cli(
    tmp_path: Path, config: Config, *args: str, followers: list[dict[str, str]] | None = None
) -> subprocess.CompletedProcess:
    doc = json.loads(config.model_dump_json())
    doc["sources"] = [source_dict(s.kind, s.name, [str(t) for t in s.tables]) for s in config.sources]
    doc["followers"] = followers or []
    path = tmp_path / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(doc))
    command = [sys.executable, "-m", "cdcsync", "--config", str(path), "connectors", "delete", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def left(config: Config) -> dict[str, object]:
    """What of the source's capture still exists."""
    source = config.sources[0]
    with admin(config) as kafka_admin:
        topics = existing_topics(kafka_admin)
    out: dict[str, object] = {
        "connector": client_for(config).status(source.name) is not None,
        "topics": sorted({spec.name for spec in topic_specs(source)} & topics),
    }
    if source.kind == "postgres":
        with pg_connect() as pg:
            out["slot"] = pg.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)
            ).fetchone()
            out["publication"] = pg.execute(
                "SELECT 1 FROM pg_publication WHERE pubname = %s", (source.publication,)
            ).fetchone()
            out["signal_table"] = pg.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_name = %s", (source.signal_table.table,)
            ).fetchone()
    return out


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_deleted_source_leaves_no_connector_slot_publication_signal_table_or_topic(kind: str, tmp_path: Path) -> None:
    table = f"gone_{uid()}"
    namespace = "public" if kind == "postgres" else ENV["MARIADB_DATABASE"]
    execute(kind, f"CREATE TABLE {table} (id int PRIMARY KEY, v int)", f"INSERT INTO {table} VALUES (1, 1)")
    config = config_for(source_dict(kind, f"del{uid()}_{kind[:2]}", [f"{namespace}.{table}"]))
    name = config.sources[0].name
    try:
        apply(config)
        wait_streaming(config)
        before = left(config)
        assert before["connector"] and before["topics"]
        if kind == "postgres":
            assert before["slot"] and before["publication"] and before["signal_table"]

        follower = {"name": "cache", "kind": "redis", "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0"}
        refused = cli(tmp_path, config, name, followers=[follower])
        assert refused.returncode == 2, refused.stderr
        assert "followers cache still read it" in refused.stderr and left(config)["connector"]

        done = cli(tmp_path, config, name, "--topics", "--json")
        assert done.returncode == 0, done.stderr
        lines = json.loads(done.stdout)["done"]
        assert f"connector {name}: deleted" in lines and any(line.startswith("topics: deleted") for line in lines)
        after = left(config)
        assert not any(after.values()), after

        again = cli(tmp_path, config, name, "--topics")
        assert again.returncode == 0, again.stderr
        assert f"connector {name}: not registered" in again.stdout and "topics: none left" in again.stdout
    finally:
        execute(kind, f"DROP TABLE IF EXISTS {table}")
