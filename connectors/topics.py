"""Pre-create the topics a source writes to, with the settings capture relies on.

Per captured table: ``cleanup.policy=compact`` so the topic keeps the latest
row per primary key (deletes end in a tombstone), with the source's
**compaction horizon** (``compaction_horizon_s``) as ``min.compaction.lag.ms``
and ``delete.retention.ms``: for that long every change, a delete's ``op=d``
event included, stays in the log uncompacted, and a follower within it never
misses a delete (docs/compaction.md). An existing table topic with other
horizon settings is corrected in place, and the correction is reported. The
heartbeat topic is compacted too. The MariaDB schema-history topic must never lose a record:
one partition, delete policy, infinite retention. An existing topic whose
cleanup policy is wrong is reported, not silently changed: compacting a topic
that consumers treat as a full history would lose data.

A table topic has ``topic_partitions`` partitions. The producer puts a record
in partition ``murmur2(key) % partitions`` (Kafka's built-in partitioner; the
key is the primary key), so each key's changes stay in one partition, in
order. An existing table topic with another count is reported and left as it
is (``partition_notes``): Kafka can only add partitions, and adding them sends
a key's later changes to another partition than its earlier ones.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cdcsync import kafka
from cdcsync.config import Config, SourceConfig
from cdcsync.errors import FatalError, RetryableError
from cdcsync.sources import kind_of

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}
# Settings an existing topic is brought to (the rest of a spec applies at creation only).
HORIZON_KEYS = ("min.compaction.lag.ms", "delete.retention.ms")
DAY_MS = str(24 * 3600 * 1000)
HISTORY = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]
    table_of: str | None = None  # the source whose table's changes it holds, keyed by primary key; None: other


def table_topic_config(source: SourceConfig) -> dict[str, str]:
    """A table topic's settings: compacted, nothing compacted before the source's horizon."""
    horizon_ms = str(source.compaction_horizon_s * 1000)
    return {**COMPACT, "min.compaction.lag.ms": horizon_ms, "delete.retention.ms": horizon_ms}


def topic_specs(source: SourceConfig) -> list[TopicSpec]:
    table_config = table_topic_config(source)
    specs = [TopicSpec(source.topic(t), source.topic_partitions, table_config, source.name) for t in source.tables]
    specs.append(TopicSpec(source.heartbeat_topic, 1, COMPACT))
    # Signals and the snapshot windows' watermarks (connectors.signals): nobody follows them.
    specs.append(TopicSpec(source.topic(source.signal_table), 1, {"cleanup.policy": "delete", "retention.ms": DAY_MS}))
    # BEGIN/END markers of each transaction: a stream, not state.
    specs.append(TopicSpec(source.transaction_topic, 1, {"cleanup.policy": "delete"}))
    if kind_of(source).capture.schema_history:
        specs.append(TopicSpec(source.schema_history_topic, 1, HISTORY))
    return specs


def admin(config: Config) -> AbstractContextManager[AdminClient]:
    """An AdminClient for a ``with`` block (``cdcsync.kafka.admin``)."""
    return kafka.admin({**config.kafka.client_config(), "socket.timeout.ms": 10000})


def partition_counts(client: AdminClient) -> dict[str, int]:
    """Every existing topic and its number of partitions."""
    try:
        return {name: len(topic.partitions) for name, topic in client.list_topics(timeout=15).topics.items()}
    except KafkaException as err:
        raise RetryableError(f"Kafka unreachable: {err}") from None


def existing_topics(client: AdminClient) -> set[str]:
    return set(partition_counts(client))


def partition_notes(specs: list[TopicSpec], counts: dict[str, int]) -> list[str]:
    """One line per existing table topic whose partition count is not its source's ``topic_partitions``.

    The topic is left as it is. Adding partitions to it would change ``murmur2(key) % partitions`` for most
    keys: a key's later changes would go to another partition than its earlier ones, in no order with them,
    and compaction would keep the key's last record in its old partition for ever (a deleted row would come
    back in a rebuild from the topics). New partitions need new topics, filled by a new snapshot.
    """
    notes = []
    for spec in specs:
        have = counts.get(spec.name)
        if spec.table_of is None or have is None or have == spec.partitions:
            continue
        notes.append(
            f"topic {spec.name}: has {have} partition(s), source {spec.table_of} asks for {spec.partitions} "
            "(topic_partitions); left as it is: partitions added to a topic move keys away from their earlier "
            'changes. New topics, a new snapshot and a bootstrap of each follower do it (docs/capture.md, "Table '
            'topics and their partitions")'
        )
    return notes


def ensure_topics(config: Config, specs: list[TopicSpec]) -> list[str]:
    """Create missing topics; return one line per action taken. Raise if an existing topic is not as required."""
    with admin(config) as client:
        counts = partition_counts(client)
        present = set(counts)
        actions, missing = [], [s for s in specs if s.name not in present]
        if missing:
            futures = client.create_topics(
                [
                    NewTopic(
                        s.name,
                        num_partitions=s.partitions,
                        replication_factor=config.kafka.topic_replication_factor,
                        config=s.config,
                    )
                    for s in missing
                ]
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=30)
                    actions.append(f"topic {name}: created")
                except KafkaException as err:
                    if "TOPIC_ALREADY_EXISTS" not in str(err):
                        raise FatalError(f"creating topic {name} failed: {err}") from None
        wanted = {s.name: s for s in specs if s.name in present}
        if wanted:
            resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in wanted]
            corrections: dict[str, dict[str, tuple[str, str]]] = {}
            for resource, future in client.describe_configs(resources).items():
                current = future.result(timeout=30)
                spec = wanted[resource.name]
                policy, expected = current["cleanup.policy"].value, spec.config["cleanup.policy"]
                if policy != expected:
                    raise FatalError(
                        f"topic {resource.name} exists with cleanup.policy={policy}, expected {expected}; "
                        f"fix it with kafka-configs --alter --entity-type topics --entity-name {resource.name} "
                        f"--add-config cleanup.policy={expected}"
                    )
                differ = {
                    key: (current[key].value, spec.config[key])
                    for key in HORIZON_KEYS
                    if key in spec.config and current[key].value != spec.config[key]
                }
                if differ:
                    corrections[resource.name] = differ
            actions += _correct(client, corrections)
        return actions + partition_notes(specs, counts)


def _correct(client: AdminClient, corrections: dict[str, dict[str, tuple[str, str]]]) -> list[str]:
    """Set the horizon settings of existing topics (incrementally: their other settings stay)."""
    if not corrections:
        return []
    resources = []
    for name, differ in corrections.items():
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        for key, (_old, new) in differ.items():
            resource.add_incremental_config(ConfigEntry(key, new, incremental_operation=AlterConfigOpType.SET))
        resources.append(resource)
    actions = []
    for resource, future in client.incremental_alter_configs(resources).items():
        try:
            future.result(timeout=30)
        except KafkaException as err:
            raise FatalError(f"topic {resource.name}: could not set its compaction horizon: {err}") from None
        changes = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in corrections[resource.name].items())
        actions.append(f"topic {resource.name}: corrected {changes}")
    return actions


def delete_topics(config: Config, names: list[str]) -> None:
    with admin(config) as client:
        present = existing_topics(client)
        todo = [n for n in names if n in present]
        if todo:
            for future in client.delete_topics(todo, operation_timeout=30).values():
                future.result(timeout=60)
