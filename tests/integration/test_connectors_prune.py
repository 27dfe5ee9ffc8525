"""``cdcsync connectors apply --prune``: the capture of a source gone from the config removed, nothing else.

Real stack: two sources applied and streaming; the second removed from the
config. A plain apply warns about it; a follower still naming one of its
tables makes ``--prune`` refuse (exit 2) before anything changes; a dry run
changes nothing; ``--prune --topics`` deletes its connector, slot,
publication and topics, while the first source keeps running and two
connectors that apply did not make (one without the deployment marker, one
with another deployment's) stay.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from cdcsync.config import Config
from cdcsync.connectors.apply import apply, client_for
from cdcsync.connectors.remove import delete
from cdcsync.connectors.render import MARKER
from cdcsync.connectors.topics import admin, existing_topics, topic_specs
from tests.support import ENV, execute, pg_connect, source_dict, uid, wait_streaming


def document(state: Path, *sources: dict[str, Any], followers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
        "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
        "sources": list(sources),
        "followers": followers or [],
        "state_dir": str(state),  # a deployment of its own: other tests' connectors are not its orphans
    }


def cli(tmp_path: Path, doc: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "cdcsync.yaml"
    path.write_text(yaml.safe_dump(doc))
    command = [sys.executable, "-m", "cdcsync", "--config", str(path), "connectors", "apply", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def in_postgres(slot: str) -> dict[str, bool]:
    with pg_connect() as pg:
        return {
            "slot": bool(pg.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()),
            "publication": bool(pg.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (slot,)).fetchone()),
        }


def test_prune_removes_the_capture_of_a_source_gone_from_the_config_and_nothing_else(tmp_path: Path) -> None:
    kept_table, gone_table = f"keep_{uid()}", f"prune_{uid()}"
    for table in (kept_table, gone_table):
        execute("postgres", f"CREATE TABLE {table} (id int PRIMARY KEY, v int)", f"INSERT INTO {table} VALUES (1, 1)")
    kept = source_dict("postgres", f"pk{uid()}", [f"public.{kept_table}"])
    gone = source_dict("postgres", f"pg{uid()}", [f"public.{gone_table}"])
    state = tmp_path / "state"
    both = Config.model_validate(document(state, kept, gone))
    client = client_for(both)
    by_hand = {f"hand{uid()}": None, f"other{uid()}": "another-deployment"}
    gone_source = both.sources[1]
    try:
        apply(both)
        wait_streaming(both)
        model = client.get_config(kept["name"]) or {}
        for name, marker in by_hand.items():  # stopped: registered, but no slot is made
            made = {k: v for k, v in model.items() if k not in (MARKER, "name")}
            made |= {"topic.prefix": name, "slot.name": f"cdcsync_{name}", "publication.name": f"cdcsync_{name}"}
            client.create_stopped(name, made | ({MARKER: marker} if marker else {}))

        only_kept = document(state, kept)
        reader = {
            "name": "cache",
            "kind": "redis",
            "url": f"redis://127.0.0.1:{ENV['REDIS_PORT']}/0",
            "tables": [f"{gone['name']}.public.{gone_table}"],
        }
        refused = cli(tmp_path, {**only_kept, "followers": [reader]}, "--prune")
        assert refused.returncode == 2, refused.stderr
        assert f"followers cache still read source {gone['name']}" in refused.stderr
        assert client.status(gone["name"]) is not None

        warned = cli(tmp_path, only_kept)
        assert warned.returncode == 0, warned.stderr
        assert f"warning: connector {gone['name']}: its source is no longer in the config" in warned.stderr
        assert f"replication slot {gone_source.slot}" in warned.stderr and "--prune" in warned.stderr
        assert not any(name in warned.stderr for name in by_hand)

        dry = cli(tmp_path, only_kept, "--prune", "--dry-run", "--topics", "--json")
        assert dry.returncode == 0, dry.stderr
        [would] = json.loads(dry.stdout)
        assert (would["connector"], would["action"]) == (gone["name"], "would prune")
        assert f"topic {gone_source.topic(gone_source.tables[0])}" in would["held"]
        assert client.status(gone["name"]) is not None and in_postgres(gone_source.slot)["slot"]

        pruned = cli(tmp_path, only_kept, "--prune", "--topics", "--json")
        assert pruned.returncode == 0, pruned.stderr
        results = {r["connector"]: r for r in json.loads(pruned.stdout)}
        assert set(results) == {kept["name"], gone["name"]}
        assert results[kept["name"]]["action"] == "unchanged"
        assert results[gone["name"]]["action"] == "pruned" and results[gone["name"]]["error"] is None
        done = results[gone["name"]]["done"]
        assert f"connector {gone['name']}: deleted" in done
        assert f"replication slot {gone_source.slot}: dropped" in done
        assert f"publication {gone_source.publication}: dropped" in done
        assert any(line.startswith("topics: deleted") for line in done)

        assert client.status(gone["name"]) is None
        assert in_postgres(gone_source.slot) == {"slot": False, "publication": False}
        with admin(both) as kafka_admin:
            assert not {s.name for s in topic_specs(gone_source)} & existing_topics(kafka_admin)
        assert in_postgres(both.sources[0].slot) == {"slot": True, "publication": True}
        status = client.status(kept["name"]) or {}
        assert status["connector"]["state"] == "RUNNING", status
        assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status
        assert all(client.status(name) is not None for name in by_hand)
    finally:
        for name in by_hand:
            client.delete(name)
        for source in both.sources:
            delete(both, source.name, topics=True, force=True)
        for table in (kept_table, gone_table):
            execute("postgres", f"DROP TABLE IF EXISTS {table}")
