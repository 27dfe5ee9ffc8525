"""What ``connectors apply`` changes in a Postgres source so that capture sees every value of every change.

Two defaults of Postgres lose changes without an error (docs/capture.md,
"Values Postgres leaves out of the log"):

- **Unchanged TOAST values.** A value stored out of line (over ~2 KB after
  compression: text, jsonb, bytea, arrays...) that an UPDATE leaves alone is
  not logged again under the default replica identity, and Debezium sends the
  column as ``__debezium_unavailable_value``. ``REPLICA IDENTITY FULL`` logs
  the old row whole, and Debezium fills the column from it. A table is at risk
  when any of its relations (the table, or each partition of a partitioned
  one, since the old row is logged by the partition that holds it) has a column
  whose storage is not ``plain`` and an identity other than ``FULL``.
- **Partitions.** A publication publishes a partition's changes under the
  partition's own name unless ``publish_via_partition_root`` is on, and the
  connector's include list, which names the parent, drops them. Debezium creates
  a new publication with the option (``publish.via.partition.root``); one that
  exists already is altered here.

``plan`` reads the catalog and returns the problems (refused at apply, each
with its fix) and the statements to run; ``carry_out`` runs them, only after
every check of every source passed. With ``sources[].set_replica_identity:
false`` a table at risk is a problem naming the ``ALTER TABLE`` to run,
instead of a statement.
"""

from __future__ import annotations

from cdcsync.config import SourceConfig
from cdcsync.sources import kind_of
from cdcsync.sources.capture import SourceSetup

__all__ = ["SourceSetup", "carry_out", "plan"]


def plan(source: SourceConfig) -> SourceSetup:
    """What ``source`` lacks for capture: problems and the statements that fix the rest (no writes)."""
    return kind_of(source).capture.setup(source)


def carry_out(source: SourceConfig, setup: SourceSetup) -> list[str]:
    """Run the planned statements in one transaction; returns what each changed.

    ``ALTER TABLE ... REPLICA IDENTITY`` takes the table's strongest lock for a moment. Queued behind a long
    transaction it would block every query of the table meanwhile, so it waits a few seconds at most
    (``cdcsync.sources.postgres.capture.LOCK_TIMEOUT_S``), and then nothing is changed and the error names the table.
    """
    if not setup.statements:
        return []
    return kind_of(source).capture.carry_out(source, setup)
