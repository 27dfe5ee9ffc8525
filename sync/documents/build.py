"""A document follower built from its config: its trees checked against the catalog, its mirror, its sink.

``sync.build.build_follower`` hands a follower with ``documents`` here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cdcsync.config import Config, FollowerConfig, SourceConfig
from cdcsync.config.deployment import captured_table
from cdcsync.errors import ConfigError, FatalError
from cdcsync.state import base_dir
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.dead_letters import DeadLetters, ensure_dead_letter_topic
from cdcsync.sync.documents.follower import DocumentFollower
from cdcsync.sync.documents.tree import Tree, resolve
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.position import checkpoint_dir
from cdcsync.sync.sinks import build_sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


Found = tuple[str, TableMapping]  # a table's topic and mapping


def mirror_path(config: Config, follower: FollowerConfig) -> Path:
    return base_dir(config) / "documents" / follower.name / "mirror.sqlite"


def check_state(follower: str, checkpoint: Path, mirror: Path) -> None:
    """Refuse a follower whose checkpoint says it applied changes its mirror does not hold (the mirror was lost).

    Started from that checkpoint, it would build documents from the changes after it only. A mirror without a
    checkpoint is fine: the changes the follower reads again from the start are in it already (the version rule).
    """
    if checkpoint.is_dir() and any(checkpoint.iterdir()) and not mirror.exists():
        raise FatalError(
            f"follower {follower}: its checkpoint {checkpoint} has changes applied but its mirror {mirror} is gone; "
            f"documents built from it would miss every row before. Stop the follower, remove {checkpoint}, then "
            f"`cdcsync bootstrap {follower}` (or `cdcsync run`, which reads the topics from their start)"
        )


def trees(config: Config, follower: FollowerConfig, mappings: dict[str, TableMapping]) -> list[Tree]:
    """Each document of the follower, resolved against its tables' catalogs; every problem in one ``ConfigError``."""
    assert follower.documents is not None
    by_table = {m.table: (topic, m) for topic, m in mappings.items()}
    found: list[Tree] = []
    problems: list[str] = []
    for name, document in follower.documents.items():
        source = config.document_source(follower, name)
        followed = {str(ref): by_table[str(ref)] for _, ref in config.document_tables(follower, name)
                    if str(ref) in by_table}  # fmt: skip

        def table(text: str, source: SourceConfig = source, followed: dict[str, Found] = followed) -> Found | None:
            ref = captured_table(source, text)
            return followed.get(str(ref)) if ref is not None else None

        try:
            found.append(resolve(name, follower.document_target(name), document,
                                 f"followers[{follower.name}].documents.{name}", table))  # fmt: skip
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return found


def build_document_follower(
    config: Config, follower: FollowerConfig, spark: SparkSession | None, open_sink: bool = True, fill: bool = False
) -> DocumentFollower:
    """``fill``: a bootstrap's follower, which writes the documents once its fill is done (``filled``)."""
    check_state(follower.name, checkpoint_dir(config, follower), mirror_path(config, follower))
    mappings = mappings_for(config, follower)
    resolved = trees(config, follower, mappings)
    sink = build_sink(config, follower, spark)
    ensure_dead_letter_topic(config, follower)
    running = DocumentFollower(
        follower.name,
        sink,
        mappings,
        DeadLetters(config.kafka.client_config(), follower.dlq_topic, follower.name),
        resolved,
        mirror_path(config, follower),
        max_attempts=follower.sink_attempts,
        chunk_bytes=follower.batch_bytes,
        filling=fill,
    )
    if open_sink:
        sink.open(running.targets())
    return running
