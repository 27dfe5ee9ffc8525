"""What both benchmarks share: the local stack's addresses, a one-table Postgres config, and cleaning up after it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy/local"))
import stack  # noqa: E402

ENV = stack.ENV


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def one_table_config(tag: str, table: str, followers: list[dict[str, Any]], state: Path, **source: Any) -> Any:
    """A config capturing ``public.<table>`` of the stack's Postgres as source ``tag``, followed by ``followers``."""
    from cdcsync.config import Config

    return Config.model_validate(
        {
            "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
            "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
            "sources": [
                {
                    "name": tag,
                    "kind": "postgres",
                    "port": int(ENV["PG_PORT"]),
                    "database": ENV["PG_DATABASE"],
                    "user": ENV["PG_USER"],
                    "password": ENV["PG_PASSWORD"],
                    "tables": [f"public.{table}"],
                    **source,
                }
            ],
            "followers": followers,
            "state_dir": str(state),
        }
    )


def cleanup(config: Any, tag: str, table: str, pg: Any) -> None:
    """Remove the connector, its slot and publication, the table, its topics, and every store named ``tag*``."""
    import redis
    from elasticsearch import Elasticsearch

    from cdcsync.connectors.apply import client_for
    from cdcsync.connectors.topics import delete_topics, topic_specs

    source = config.sources[0]
    client_for(config).delete(source.name)
    time.sleep(3)
    pg.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active",
        (source.slot,),
    )
    pg.execute(f"DROP PUBLICATION IF EXISTS {source.publication}")
    pg.execute(f"DROP TABLE IF EXISTS {table}")
    delete_topics(config, [t.name for t in topic_specs(source)] + [f.dlq_topic for f in config.followers])
    Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}").indices.delete(index=f"{tag}-*", allow_no_indices=True)
    r = redis.Redis(port=int(ENV["REDIS_PORT"]))
    for key in r.scan_iter(f"{tag}*", count=5000):
        r.delete(key)
