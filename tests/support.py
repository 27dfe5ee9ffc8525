"""Shared helpers for the integration and chaos tests: the real local stack, no stand-ins.

Ports and credentials come from deploy/local/stack.env through the stack
module itself, so the tests talk to exactly what `make up` started. Every
capture scenario gets unique table, connector, slot and topic names and removes
them afterwards.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql
from confluent_kafka import Consumer, TopicPartition

from cdcsync.config import Config
from cdcsync.connectors.apply import apply, status

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy/local"))
import stack  # noqa: E402  (stdlib-only module beside the stack it manages)

ENV = stack.ENV


def uid() -> str:
    return uuid.uuid4().hex[:8]


def pg_connect(autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1",
        port=int(ENV["PG_PORT"]),
        dbname=ENV["PG_DATABASE"],
        user=ENV["PG_USER"],
        password=ENV["PG_PASSWORD"],
        autocommit=autocommit,
    )


def maria_connect(autocommit: bool = True) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=int(ENV["MARIADB_PORT"]),
        user=ENV["MARIADB_USER"],
        password=ENV["MARIADB_PASSWORD"],
        database=ENV["MARIADB_DATABASE"],
        autocommit=autocommit,
    )


def pg_admin() -> psycopg.Connection:
    """The superuser, over the local socket: for what the capture user may not do (roles, privileges)."""
    return psycopg.connect(
        host=str(stack.RUN), port=int(ENV["PG_PORT"]), dbname=ENV["PG_DATABASE"], user="postgres", autocommit=True
    )


def maria_admin() -> pymysql.connections.Connection:
    return pymysql.connect(unix_socket=str(stack.RUN / "mariadb.sock"), user="root", autocommit=True)


def execute(kind: str, *statements: str, params: Any = None) -> None:
    """Run statements in one transaction on the given source."""
    if kind == "postgres":
        with pg_connect(autocommit=False) as conn:
            for sql in statements:
                conn.execute(sql, params)
    else:
        conn = maria_connect(autocommit=False)
        with conn, conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql, params)
            conn.commit()


def source_dict(kind: str, name: str, tables: list[str], **extra: Any) -> dict[str, Any]:
    if kind == "postgres":
        base = {
            "port": int(ENV["PG_PORT"]),
            "database": ENV["PG_DATABASE"],
            "user": ENV["PG_USER"],
            "password": ENV["PG_PASSWORD"],
        }
    else:
        base = {
            "port": int(ENV["MARIADB_PORT"]),
            "database": ENV["MARIADB_DATABASE"],
            "user": ENV["MARIADB_USER"],
            "password": ENV["MARIADB_PASSWORD"],
        }
    return {
        "name": name,
        "kind": kind,
        "host": "127.0.0.1",
        "tables": tables,
        "heartbeat_interval_ms": 500,
        **base,
        **extra,
    }


def config_for(*sources: dict[str, Any]) -> Config:
    return Config.model_validate(
        {
            "kafka": {"bootstrap_servers": f"127.0.0.1:{ENV['KAFKA_PORT']}"},
            "connect": {"url": f"http://127.0.0.1:{ENV['CONNECT_PORT']}"},
            "sources": list(sources),
        }
    )


# --------------------------------------------------------------------------- Kafka


@dataclass
class Record:
    offset: int
    key: Any
    value: Any  # None for a tombstone
    partition: int = 0

    @property
    def op(self) -> str | None:
        return None if self.value is None else self.value["op"]


def read_topic(topic: str, done: Callable[[list[Record]], bool], timeout: float = 90) -> list[Record]:
    """Read every partition of a topic from the start until ``done(records)`` holds; fail after ``timeout``.

    Records come in offset order per partition (a topic of one partition: in offset order).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}",
            "group.id": f"test-{uid()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions or {0: None}
    consumer.assign([TopicPartition(topic, p, 0) for p in sorted(partitions)])
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while not done(records):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"topic {topic}: condition not met after {timeout}s; read {len(records)} records:\n"
                    + "\n".join(f"  {r.offset} {r.key} {r.op}" for r in records[-20:])
                )
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error():
                    continue
                records.append(
                    Record(
                        msg.offset(),
                        json.loads(msg.key()) if msg.key() else None,
                        json.loads(msg.value()) if msg.value() is not None else None,
                        msg.partition(),
                    )
                )
    finally:
        consumer.close()
    return records


def end_offset(topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ENV['KAFKA_PORT']}", "group.id": f"test-{uid()}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


# --------------------------------------------------------------------------- capture scenarios


def wait_streaming(config: Config, timeout: float = 120) -> None:
    """Wait until every source's connector is RUNNING and streaming (its heartbeat topic has a record)."""
    deadline = time.monotonic() + timeout
    for source in config.sources:
        while True:
            report = status(config, [source.name])[0]
            if (
                report["state"] == "RUNNING"
                and report["tasks"]
                and report["tasks"][0]["state"] == "RUNNING"
                and end_offset(source.heartbeat_topic) > 0
            ):
                break
            if report["tasks"] and report["tasks"][0]["state"] == "FAILED":
                raise AssertionError(f"connector {source.name} failed: {report['tasks'][0].get('trace')}")
            if time.monotonic() > deadline:
                raise AssertionError(f"connector {source.name} not streaming after {timeout}s: {report}")
            time.sleep(0.5)


def drop_capture(config: Config) -> None:
    """Remove connectors, replication slots, publications, signal tables and topics a scenario created."""
    from cdcsync.connectors.remove import delete

    for source in config.sources:
        delete(config, source.name, topics=True, force=True)


@contextmanager
def captured(kind: str, ddl: list[str], tables: list[str], **extra: Any) -> Iterator[Config]:
    """Create tables, register a connector for them, wait until it streams; undo everything afterwards."""
    name = f"t{uid()}_{'pg' if kind == 'postgres' else 'maria'}"
    execute(kind, *ddl)
    config = config_for(source_dict(kind, name, tables, **extra))
    try:
        apply(config)
        wait_streaming(config)
        yield config
    finally:
        drop_capture(config)
        for table in tables:
            if isinstance(table, str):
                execute(kind, f"DROP TABLE IF EXISTS {table}")


@contextmanager
def in_background(step: Callable[[], None], pause_s: float = 0.0) -> Iterator[None]:
    """``step`` again and again on a thread of its own until the block ends; an error it raised fails the block."""
    stop, errors = threading.Event(), []

    def loop() -> None:
        try:
            while not stop.is_set():
                step()
                time.sleep(pause_s)
        except BaseException as err:
            errors.append(err)

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()
    assert not errors, errors


@contextmanager
def killing_a_child_process(timeout_s: float = 120) -> Iterator[list[int]]:
    """SIGKILL the first child process this one starts (``multiprocessing``'s) within ``timeout_s``, as the
    kernel's out-of-memory killer would; yields the list that receives its pid."""
    killed: list[int] = []
    done = threading.Event()

    def kill() -> None:
        deadline = time.monotonic() + timeout_s
        while not killed and not done.is_set() and time.monotonic() < deadline:
            for child in multiprocessing.active_children():
                os.kill(child.pid or 0, signal.SIGKILL)
                killed.append(child.pid or 0)
                break
            time.sleep(0.01)

    killer = threading.Thread(target=kill)
    killer.start()
    try:
        yield killed
    finally:
        done.set()  # the block ended: a killer that found nothing stops
        killer.join()
