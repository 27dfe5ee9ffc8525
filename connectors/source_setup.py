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

from dataclasses import dataclass, field

import psycopg
import psycopg.errors

from cdcsync.config import SourceConfig, TableRef
from cdcsync.db import connect_postgres
from cdcsync.errors import RetryableError

VIA_ROOT = "publish.via.partition.root"


@dataclass
class SourceSetup:
    problems: list[str] = field(default_factory=list)
    statements: list[tuple[str, str]] = field(default_factory=list)  # (SQL, what it changes, for the operator)


def quoted(schema: str, name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


def plan(source: SourceConfig) -> SourceSetup:
    """What the Postgres ``source`` lacks for capture: problems and the statements that fix the rest (no writes)."""
    setup = SourceSetup()
    if source.kind != "postgres":
        return setup
    where = f"source {source.name} (postgres {source.host}:{source.port}/{source.database})"
    try:
        conn = connect_postgres(source, timeout_s=5)
    except psycopg.OperationalError:
        return setup  # preflight reports it
    with conn:
        superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        is_super = bool(superuser and superuser[0])
        for table in source.tables:
            _plan_table(conn, source, table, is_super, where, setup)
        if source.debezium.get(VIA_ROOT, "true").lower() == "true":
            row = conn.execute(
                "SELECT p.pubviaroot, pg_get_userbyid(p.pubowner) = current_user FROM pg_publication p"
                " WHERE p.pubname = %s",
                (source.publication,),
            ).fetchone()
            if row is not None and not row[0]:
                if row[1] or is_super:
                    setup.statements.append(
                        (
                            f'ALTER PUBLICATION "{source.publication}" SET (publish_via_partition_root = true)',
                            f"publication {source.publication} now publishes a partition's changes under its "
                            "partitioned table's name",
                        )
                    )
                else:
                    setup.problems.append(
                        f"{where}: publication {source.publication} publishes partitions under their own names, "
                        "which capture drops; as its owner run ALTER PUBLICATION "
                        f'"{source.publication}" SET (publish_via_partition_root = true)'
                    )
    return setup


def _plan_table(
    conn: psycopg.Connection, source: SourceConfig, table: TableRef, is_super: bool, where: str, setup: SourceSetup
) -> None:
    relation = quoted(table.namespace, table.table)
    # Every relation of the table's partition tree (the table alone when it has none) whose identity is not FULL
    # and that has a column Postgres may store out of line; leaves only: a partitioned table stores no rows.
    rows = conn.execute(
        "SELECT n.nspname, c.relname, c.relreplident, pg_get_userbyid(c.relowner) = current_user,"
        " array(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0"
        "  AND NOT a.attisdropped AND a.attstorage <> 'p' ORDER BY a.attnum)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relkind = 'r' AND (c.oid = to_regclass(%s)"  # pg_partition_tree is empty for a plain table
        "  OR c.oid IN (SELECT t.relid FROM pg_partition_tree(to_regclass(%s)) t WHERE t.isleaf))"
        " ORDER BY c.oid = to_regclass(%s) DESC, c.relname",
        (relation, relation, relation),
    ).fetchall()
    for schema, name, identity, owned, columns in rows:
        if identity == "f" or not columns:
            continue
        alter = f"ALTER TABLE {quoted(schema, name)} REPLICA IDENTITY FULL"
        what = (
            str(table) if (schema, name) == (table.namespace, table.table) else f"{table} (partition {schema}.{name})"
        )
        shown = ", ".join(columns[:5]) + (f" and {len(columns) - 5} more" if len(columns) > 5 else "")
        if not source.set_replica_identity:
            setup.problems.append(
                f"{where}: table {what} has REPLICA IDENTITY {_IDENTITY.get(identity, identity)}, so an UPDATE that "
                f"leaves a large value of {shown} alone reaches the followers as Debezium's placeholder; run "
                f"{alter} (or set sources[{source.name}].set_replica_identity: true and apply does it)"
            )
        elif not (owned or is_super):
            setup.problems.append(
                f"{where}: table {what} needs REPLICA IDENTITY FULL (an UPDATE that leaves a large value of {shown} "
                f"alone would reach the followers as Debezium's placeholder), and {source.user} does not own it; "
                f"as its owner run {alter}"
            )
        else:
            setup.statements.append((alter, f"table {what}: REPLICA IDENTITY FULL (was {_IDENTITY[identity]})"))


_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX", "f": "FULL"}


LOCK_TIMEOUT_S = 10


def carry_out(source: SourceConfig, setup: SourceSetup) -> list[str]:
    """Run the planned statements in one transaction; returns what each changed.

    ``ALTER TABLE ... REPLICA IDENTITY`` takes the table's strongest lock for a moment. Queued behind a long
    transaction it would block every query of the table meanwhile, so it waits ``LOCK_TIMEOUT_S`` at most,
    and then nothing is changed and the error names the table.
    """
    if not setup.statements:
        return []
    with connect_postgres(source) as conn, conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_S}s'")  # type: ignore[call-overload]
        for sql, what in setup.statements:
            try:
                conn.execute(sql)  # type: ignore[call-overload]  # identifiers quoted by quoted()
            except psycopg.errors.LockNotAvailable:
                raise RetryableError(
                    f"source {source.name}: {sql} waited {LOCK_TIMEOUT_S} s for its lock (a long transaction holds "
                    f"the table) and nothing was changed; run it again when that transaction ends ({what})"
                ) from None
    return [what for _, what in setup.statements]
