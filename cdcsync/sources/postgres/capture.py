"""Capture of Postgres: Debezium's Postgres connector over a slot and a publication (pgoutput).

Besides the connector, capture owns a replication slot (which keeps every WAL
segment from its position on until it is dropped) and a publication; it sets
``REPLICA IDENTITY FULL`` where an unchanged large value would be left out of
the log (``setup``), and follows partitions attached to a captured table,
whose rows never pass through the log (``leaves``; ``connectors.partitions``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import psycopg
import psycopg.errors

from cdcsync.errors import FatalError, RetryableError
from cdcsync.sources.base import TableName
from cdcsync.sources.capture import Capture, CapturedSource, Leaves, SourceSetup
from cdcsync.sources.postgres.connection import connect, fetch

VIA_ROOT = "publish.via.partition.root"
LOCK_TIMEOUT_S = 10  # how long an ALTER TABLE ... REPLICA IDENTITY waits for its lock (carry_out)
SLOT_WAIT_S = 60.0  # for the old task's connection to let go of the slot (remove)

# The tables capture could take: whole tables (a partitioned table, not its partitions) with a primary key,
# that the source's user owns (a publication holds only those).
TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%%'
  AND EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
  AND (pg_get_userbyid(c.relowner) = current_user OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
"""

_IDENTITY = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX", "f": "FULL"}


def quoted(schema: str, name: str) -> str:
    """``schema.name``, each part double-quoted."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


def _slot(name: str | None) -> str:
    return f"replication slot {name} (it keeps every WAL segment from now on until it is dropped)"


class PostgresCapture(Capture):
    connector_class = "io.debezium.connector.postgresql.PostgresConnector"
    template = "postgres"
    schema_history = False  # pgoutput sends each relation's columns with its changes
    driver_errors: ClassVar[tuple[type[BaseException], ...]] = (psycopg.Error,)

    def capturable(self, source: CapturedSource) -> list[tuple[Any, Any]]:
        return fetch(source, TABLES)

    def preflight(self, source: CapturedSource, new: bool) -> list[str]:
        where = f"source {source.name} (postgres {source.host}:{source.port}/{source.database})"
        try:
            conn = connect(source, timeout_s=5)
        except psycopg.OperationalError as err:
            return [f"{where}: cannot connect as {source.user}: {str(err).strip().splitlines()[-1]}"]
        problems = []
        with conn:
            wal_level = conn.execute("SHOW wal_level").fetchone()[0]  # type: ignore[index]
            if wal_level != "logical":
                problems.append(
                    f"{where}: wal_level is {wal_level!r}; set wal_level = logical in postgresql.conf and restart "
                    "Postgres"
                )
            super_, repl = conn.execute(
                "SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user"
            ).fetchone()  # type: ignore[misc]
            if not (super_ or repl):
                problems.append(
                    f"{where}: role {source.user} lacks REPLICATION; run ALTER ROLE {source.user} REPLICATION"
                )
            for table in source.tables:
                row = conn.execute(
                    "SELECT c.oid, pg_get_userbyid(c.relowner) = current_user,"
                    " EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)"
                    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
                    (table.namespace, table.table),
                ).fetchone()
                if row is None:
                    problems.append(
                        f"{where}: unknown table {table} in sources[{source.name}].tables; create it or remove it"
                    )
                    continue
                _, owned, has_pk = row
                if not has_pk:
                    problems.append(f"{where}: table {table} has no primary key; topics are keyed and compacted by it")
                problems.extend(_multidimensional(conn, table, where))
                if not owned and not super_:
                    problems.append(
                        f"{where}: {source.user} does not own {table}, so Debezium cannot add it to publication "
                        f"{source.publication}; create the publication as its owner or grant ownership"
                    )
        return problems

    def setup(self, source: CapturedSource) -> SourceSetup:
        """Unchanged TOAST values and partitions published under their own names (``connectors.source_setup``)."""
        setup = SourceSetup()
        where = f"source {source.name} (postgres {source.host}:{source.port}/{source.database})"
        try:
            conn = connect(source, timeout_s=5)
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

    def carry_out(self, source: CapturedSource, setup: SourceSetup) -> list[str]:
        """In one transaction; an ``ALTER TABLE`` waits ``LOCK_TIMEOUT_S`` for its lock at most (then nothing
        is changed and the error names the table)."""
        with connect(source) as conn, conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_S}s'")  # type: ignore[call-overload]
            for sql, what in setup.statements:
                try:
                    conn.execute(sql)  # type: ignore[call-overload]  # identifiers quoted by quoted()
                except psycopg.errors.LockNotAvailable:
                    raise RetryableError(
                        f"source {source.name}: {sql} waited {LOCK_TIMEOUT_S} s for its lock (a long transaction "
                        f"holds the table) and nothing was changed; run it again when that transaction ends ({what})"
                    ) from None
        return [what for _, what in setup.statements]

    def leaves(self, source: CapturedSource) -> Leaves:
        """Every captured partitioned table's leaf partitions now (tables without partitions are left out)."""
        names = {quoted(t.namespace, t.table): str(t) for t in source.tables}
        rows = fetch(  # one query for every table: the capture watch asks each minute
            source,
            "SELECT r.name, c.oid::bigint, n.nspname, c.relname FROM unnest(%s::text[]) AS r(name)"
            " CROSS JOIN LATERAL pg_partition_tree(to_regclass(r.name)) t JOIN pg_class c ON c.oid = t.relid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.isleaf AND t.level > 0",
            (list(names),),
        )
        found: Leaves = {}
        for name, oid, schema, relname in rows:
            found.setdefault(names[name], {})[str(oid)] = f"{schema}.{relname}"
        return found

    def slot(self, source: CapturedSource) -> str | None:
        return source.slot

    def retained_wal(self, source: CapturedSource) -> int | None:
        with connect(source, timeout_s=5, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (source.slot,),
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def end_slot_backend(self, source: CapturedSource) -> int | None:
        """``pg_terminate_backend``, allowed to the slot's own role."""
        with connect(source, timeout_s=5, autocommit=True) as conn:
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s AND active", (source.slot,)
            ).fetchone()
            if row is None or row[0] is None:
                return None
            conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            return int(row[0])

    def probe(self, source: CapturedSource) -> None:
        connect(source, timeout_s=3).close()

    def held(self, source: CapturedSource) -> list[str]:
        return [_slot(source.slot), f"publication {source.publication}"]

    def held_in(self, connector_config: Mapping[str, str]) -> list[str]:
        return [_slot(connector_config.get("slot.name")), f"publication {connector_config.get('publication.name')}"]

    def rebuilt(self, connector_config: Mapping[str, str], signal_namespace: str) -> dict[str, Any]:
        return {
            "database": connector_config.get("database.dbname"),
            "slot": connector_config.get("slot.name"),
            "publication": connector_config.get("publication.name"),
        }

    def resumes_stale_offsets(self, source: CapturedSource) -> bool:
        """Only while its slot exists: a new slot starts at the present, past every change after the old offset."""
        with connect(source, timeout_s=5, autocommit=True) as conn:
            return (
                conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)).fetchone()
                is not None
            )

    def log_position(self, source: CapturedSource) -> Any:
        """The LSN of ``pg_current_wal_lsn()``, as a number."""
        with connect(source, timeout_s=5, autocommit=True) as conn:
            row = conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
            return row[0] if row else None

    def went_back(self, committed: dict[str, Any], current: Any) -> str | None:
        lsn = committed.get("lsn")
        if isinstance(lsn, int) and current is not None and int(current) < lsn:
            return f"its WAL position {int(current)} is behind the LSN {lsn} capture already read"
        return None

    def remove(self, source: CapturedSource) -> list[str]:
        """The slot once inactive (``SLOT_WAIT_S`` at most), then the publication and the signal table."""
        from psycopg import sql

        done = []
        with connect(source, autocommit=True) as pg:
            deadline = time.monotonic() + SLOT_WAIT_S
            while True:
                row = pg.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)
                ).fetchone()
                if row is None:
                    done.append(f"replication slot {source.slot}: none")
                    break
                if row[0] is None:
                    pg.execute("SELECT pg_drop_replication_slot(%s)", (source.slot,))
                    done.append(f"replication slot {source.slot}: dropped")
                    break
                if time.monotonic() > deadline:
                    raise FatalError(
                        f"replication slot {source.slot}: still used by PID {row[0]} {SLOT_WAIT_S:.0f}s after the "
                        f"connector was deleted; stop that backend (SELECT pg_terminate_backend({row[0]})) and run "
                        "this again"
                    )
                time.sleep(1)
            exists = pg.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (source.publication,)).fetchone()
            if exists:
                pg.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(source.publication or "")))
            done.append(f"publication {source.publication}: {'dropped' if exists else 'none'}")
            table = source.signal_table
            found = pg.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (table.namespace, table.table),
            ).fetchone()
            if found:
                pg.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table.namespace, table.table)))
            done.append(f"signal table {table}: {'dropped' if found else 'none'}")
        return done

    def drop_sql(self, source: CapturedSource) -> str:
        table = source.signal_table
        return (
            f"SELECT pg_drop_replication_slot('{source.slot}'); DROP PUBLICATION IF EXISTS {source.publication}; "
            f"DROP TABLE IF EXISTS {quoted(table.namespace, table.table)}"
        )

    def unknown_schemas(
        self, source: CapturedSource, current: Mapping[str, str], added: Sequence[TableName]
    ) -> list[str]:
        return []  # pgoutput sends each relation's columns with its first change: no history to lack

    def signal_table_usable(self, source: CapturedSource) -> bool | None:
        """Whether the source's user owns it: a filtered publication holds only tables its user owns."""
        table = source.signal_table
        rows = fetch(
            source,
            "SELECT pg_get_userbyid(c.relowner) = current_user OR (SELECT rolsuper FROM pg_roles"
            " WHERE rolname = current_user) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s",
            (table.namespace, table.table),
        )
        return bool(rows[0][0]) if rows else None


def _plan_table(
    conn: psycopg.Connection,
    source: CapturedSource,
    table: TableName,
    is_super: bool,
    where: str,
    setup: SourceSetup,
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


def _multidimensional(conn: psycopg.Connection, table: TableName, where: str) -> list[str]:
    """Array columns declared with several dimensions: Debezium 3.2 sends such an array as nulls, silently.

    Postgres does not enforce an array's declared dimensions, so this sees only what the DDL says
    (``int[][]``); docs/types.md lists the gap.
    """
    rows = conn.execute(
        "SELECT a.attname, a.attndims, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped AND a.attndims > 1",
        (quoted(table.namespace, table.table),),
    ).fetchall()
    return [
        f"{where}: table {table}: column {name} is declared as a {dims}-dimensional array ({kind}), which "
        "Debezium sends as an array of nulls; store it as jsonb, or as a one-dimensional array"
        for name, dims, kind in rows
    ]
