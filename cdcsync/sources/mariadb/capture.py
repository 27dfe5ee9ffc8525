"""Capture of MariaDB: Debezium's MariaDB connector over the row-based binlog with GTIDs.

Capture owns nothing on the server but its signal table: the connector reads
the binlog as a replica does, from a GTID position, and keeps the DDL of the
captured databases in its schema-history topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pymysql  # type: ignore[import-untyped]

from cdcsync.sources.base import TableName
from cdcsync.sources.capture import Capture, CapturedSource, Leaves, SourceSetup
from cdcsync.sources.mariadb.connection import connect, fetch

HISTORY_OF_CAPTURED_ONLY = "schema.history.internal.store.only.captured.tables.ddl"

# The tables capture could take: base tables with a primary key, outside the server's own databases.
TABLES = """
SELECT t.table_schema, t.table_name FROM information_schema.tables t
WHERE t.table_type = 'BASE TABLE'
  AND t.table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
  AND EXISTS (SELECT 1 FROM information_schema.table_constraints k WHERE k.table_schema = t.table_schema
              AND k.table_name = t.table_name AND k.constraint_type = 'PRIMARY KEY')
"""

# MariaDB column types Debezium 3.2's DDL parser does not know: reading such a table's DDL fails the connector.
UNPARSEABLE_TYPES = {"inet4": "VARCHAR(15) or INT UNSIGNED", "inet6": "VARCHAR(39) or BINARY(16)"}


def _quoted(table: TableName) -> str:
    return ".".join("`" + part.replace("`", "``") + "`" for part in (table.namespace, table.table))


def gtid_seq(gtids: str, domain: str = "0") -> int | None:
    """The sequence number of ``domain``'s GTID in a GTID position (``0-1-345,1-1-3``), or None."""
    for gtid in gtids.split(","):
        parts = gtid.strip().split("-")
        if len(parts) == 3 and parts[0] == domain and parts[2].isdigit():
            return int(parts[2])
    return None


class MariaDBCapture(Capture):
    connector_class = "io.debezium.connector.mariadb.MariaDbConnector"
    template = "mariadb"
    schema_history = True  # one partition, never compacted nor expired (connectors.topics)
    driver_errors: ClassVar[tuple[type[BaseException], ...]] = (pymysql.MySQLError,)

    def capturable(self, source: CapturedSource) -> list[tuple[Any, Any]]:
        return fetch(source, TABLES)

    def preflight(self, source: CapturedSource, new: bool) -> list[str]:
        """The server settings, grants and tables capture needs; ``new``: before the connector's first snapshot."""
        where = f"source {source.name} ({source.kind} {source.host}:{source.port})"
        try:
            conn = connect(source, timeout_s=5, database=False)
        except pymysql.MySQLError as err:
            return [f"{where}: cannot connect as {source.user}: {err}"]
        problems = []
        with conn, conn.cursor() as cur:
            cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image")
            log_bin, fmt, image = cur.fetchone()
            if not log_bin:
                problems.append(f"{where}: the binary log is off; start the server with --log-bin")
            if fmt != "ROW":
                problems.append(f"{where}: binlog_format is {fmt}; set binlog_format = ROW")
            if image != "FULL":
                problems.append(f"{where}: binlog_row_image is {image}; set binlog_row_image = FULL")
            problems.extend(_gtid_problems(cur, where))
            cur.execute("SHOW GRANTS")
            grants = " ".join(row[0] for row in cur.fetchall()).upper()
            if "REPLICATION SLAVE" not in grants and "ALL PRIVILEGES ON *.*" not in grants:
                problems.append(
                    f"{where}: {source.user} lacks REPLICATION SLAVE; run GRANT REPLICATION SLAVE, BINLOG MONITOR, "
                    f"RELOAD, SELECT ON *.* TO '{source.user}'@'%'"
                )
            problems.extend(_unparseable_columns(cur, source, where, new))
            for table in source.tables:
                cur.execute(
                    "SELECT t.table_name, EXISTS (SELECT 1 FROM information_schema.table_constraints c"
                    " WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name"
                    " AND c.constraint_type = 'PRIMARY KEY')"
                    " FROM information_schema.tables t WHERE t.table_schema = %s AND t.table_name = %s",
                    (table.namespace, table.table),
                )
                row = cur.fetchone()
                if row is None:
                    problems.append(
                        f"{where}: unknown table {table} in sources[{source.name}].tables; create it or remove it"
                    )
                elif not row[1]:
                    problems.append(f"{where}: table {table} has no primary key; topics are keyed and compacted by it")
        return problems

    def setup(self, source: CapturedSource) -> SourceSetup:
        return SourceSetup()  # full row images are a server setting (preflight): nothing to change per table

    def carry_out(self, source: CapturedSource, setup: SourceSetup) -> list[str]:
        return []

    def leaves(self, source: CapturedSource) -> Leaves | None:
        return None  # a partition's rows reach the binlog as its table's

    def slot(self, source: CapturedSource) -> str | None:
        return None

    def retained_wal(self, source: CapturedSource) -> int | None:
        return None

    def end_slot_backend(self, source: CapturedSource) -> int | None:
        return None

    def probe(self, source: CapturedSource) -> None:
        connect(source, timeout_s=3, database=False).close()

    def held(self, source: CapturedSource) -> list[str]:
        return []

    def held_in(self, connector_config: Mapping[str, str]) -> list[str]:
        return []

    def rebuilt(self, connector_config: Mapping[str, str], signal_namespace: str) -> dict[str, Any]:
        return {"database": signal_namespace}

    def resumes_stale_offsets(self, source: CapturedSource) -> bool:
        """Always: its offsets are a GTID position, and resuming from one replays the binlog since (a purged
        binlog fails loudly in Debezium itself)."""
        return True

    def log_position(self, source: CapturedSource) -> Any:
        """``@@gtid_binlog_pos``."""
        conn = connect(source, timeout_s=5, database=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@gtid_binlog_pos")
                row = cur.fetchone()
                return row[0] if row else None
        finally:
            conn.close()

    def went_back(self, committed: dict[str, Any], current: Any) -> str | None:
        gtids = committed.get("gtids")
        seq = gtid_seq(gtids) if isinstance(gtids, str) else None
        now = gtid_seq(str(current or ""))
        if seq is not None and (now is None or now < seq):
            return f"its GTID position {current or 'empty'} is behind {gtids}, which capture already read"
        return None

    def remove(self, source: CapturedSource) -> list[str]:
        table = source.signal_table
        connection = connect(source)
        try:
            with connection.cursor() as cursor:
                found = cursor.execute(
                    "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                    (table.namespace, table.table),
                )
                if found:
                    cursor.execute(f"DROP TABLE {_quoted(table)}")
            connection.commit()
        finally:
            connection.close()
        return [f"signal table {table}: {'dropped' if found else 'none'}"]

    def drop_sql(self, source: CapturedSource) -> str:
        return f"DROP TABLE IF EXISTS {_quoted(source.signal_table)}"

    def unknown_schemas(
        self, source: CapturedSource, current: Mapping[str, str], added: Sequence[TableName]
    ) -> list[str]:
        """Added tables whose schema the running connector never recorded: it would fail on their first change.

        The connector knows a table's columns from its schema history, which
        holds the DDL of every table of the captured databases, unless the
        connector was created by an earlier cdcsync with ``store.only.captured.
        tables.ddl=true`` (captured tables only), or the table is in a database it
        did not capture. Those connectors must be created anew (a full snapshot).
        """
        if not added:
            return []
        databases = set(filter(None, current.get("database.include.list", "").split(",")))
        captured_only = current.get(HISTORY_OF_CAPTURED_ONLY, "false").lower() == "true"
        lacking = [t for t in added if captured_only or re.escape(t.namespace) not in databases]
        if not lacking:
            return []
        why = "keeps the DDL of its captured tables only" if captured_only else "does not capture their databases"
        return [
            f"source {source.name}: cannot add {', '.join(map(str, lacking))} to the running connector: its schema "
            f"history {why}, so their first change would fail its task. Create the connector anew (a full "
            f"snapshot; followers rank its rows by version, nothing is lost): DELETE /connectors/{source.name} on "
            'Kafka Connect, then `cdcsync connectors apply` (docs/schema-changes.md, "A table added")'
        ]

    def signal_table_usable(self, source: CapturedSource) -> bool | None:
        """Whether it exists: the source's user needs only SELECT and INSERT on it."""
        table = source.signal_table
        rows = fetch(
            source,
            "SELECT TRUE FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (table.namespace, table.table),
        )
        return bool(rows[0][0]) if rows else None


def _unparseable_columns(cur: Any, source: CapturedSource, where: str, new: bool) -> list[str]:
    """Columns whose DDL would stop the connector: in a captured table, or, before its first snapshot, any table.

    The connector keeps the DDL of every table of its databases (docs/capture.md, "Signals"). Its snapshot
    reads each one's, captured or not, and fails on such a column; once streaming, it skips a statement
    that names such a type and no captured table (``connectors.render.ddl_filter``).
    """
    databases = sorted({t.namespace for t in source.tables})
    marks = ", ".join(["%s"] * len(databases))
    cur.execute(
        "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns"
        f" WHERE table_schema IN ({marks}) AND LOWER(data_type) IN ('inet4', 'inet6')"
        " ORDER BY table_schema, table_name, ordinal_position",
        databases,
    )
    captured = {str(t) for t in source.tables}
    problems = []
    for schema, table, column, kind in cur.fetchall():
        name = f"{schema}.{table}"
        if name not in captured and not new:
            continue
        scope = "" if name in captured else f", which is not captured but lives in captured database {schema}"
        problems.append(
            f"{where}: table {name}{scope}: column {column} is {kind.upper()}, a type Debezium's DDL parser cannot "
            f"read, so capture of database {schema} would stop{'' if name in captured else ' in its first snapshot'}"
            f"; change it to {UNPARSEABLE_TYPES[kind.lower()]}, or move the table to a database this source does"
            " not capture (docs/capture.md)"
        )
    return problems


def _gtid_problems(cur: Any, where: str) -> list[str]:
    """A change's version is its GTID sequence number in domain 0 (cdcsync/events.py): check the server keeps it so."""
    cur.execute("SELECT @@gtid_domain_id, @@gtid_strict_mode, @@gtid_binlog_pos")
    domain, strict, binlog_pos = cur.fetchone()
    return gtid_problems(int(domain), bool(strict), str(binlog_pos or ""), where)


def gtid_problems(domain: int, strict: bool, binlog_pos: str, where: str) -> list[str]:
    """The GTID settings of a MariaDB server that would make versions wrong, each with its fix (pure)."""
    problems = []
    if domain != 0:
        problems.append(
            f"{where}: gtid_domain_id is {domain}; cdcsync orders changes by the GTID sequence of domain 0 and "
            "dead-letters other domains: set gtid_domain_id = 0 (server option --gtid-domain-id=0)"
        )
    others = sorted({gtid.split("-")[0] for gtid in binlog_pos.split(",") if gtid.strip()} - {"0"})
    if others:
        problems.append(
            f"{where}: the binlog holds GTIDs of domain(s) {', '.join(others)} (gtid_binlog_pos {binlog_pos}); "
            "cdcsync follows domain 0 only: write every captured change in domain 0, and purge or reset the "
            "binlog of the other domains before capturing"
        )
    if not strict:
        problems.append(
            f"{where}: gtid_strict_mode is OFF, so a GTID sequence number can go backwards and newer changes "
            "would be skipped as older; SET GLOBAL gtid_strict_mode = ON and add --gtid-strict-mode=1 to the "
            "server options"
        )
    return problems
