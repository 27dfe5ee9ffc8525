"""Pre-flight checks: is each source ready for Debezium, and is Kafka Connect?

Every check that fails says what is wrong and how to fix it, in the words an
operator would act on ("set wal_level = logical in postgresql.conf and
restart"). All checks run and all problems are reported together; nothing is
registered unless all pass.
"""

from __future__ import annotations

import psycopg
import pymysql  # type: ignore[import-untyped]

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.connectors.client import ConnectClient, ConnectUnreachable
from cdcsync.connectors.render import CONNECTOR_CLASSES
from cdcsync.db import connect_mariadb, connect_postgres


def check_connect(client: ConnectClient, config: Config) -> list[str]:
    try:
        installed = set(client.plugins())
    except ConnectUnreachable as err:
        return [str(err)]
    problems = []
    for kind in sorted({s.kind for s in config.sources}):
        if CONNECTOR_CLASSES[kind] not in installed:
            problems.append(
                f"Kafka Connect at {client.url} has no {CONNECTOR_CLASSES[kind]} plugin; "
                "put the Debezium connector's jars in a directory on its plugin.path and restart it"
            )
    return problems


def check_postgres(source: SourceConfig) -> list[str]:
    where = f"source {source.name} (postgres {source.host}:{source.port}/{source.database})"
    try:
        conn = connect_postgres(source, timeout_s=5)
    except psycopg.OperationalError as err:
        return [f"{where}: cannot connect as {source.user}: {str(err).strip().splitlines()[-1]}"]
    problems = []
    with conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()[0]  # type: ignore[index]
        if wal_level != "logical":
            problems.append(
                f"{where}: wal_level is {wal_level!r}; set wal_level = logical in postgresql.conf and restart Postgres"
            )
        super_, repl = conn.execute(
            "SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user"
        ).fetchone()  # type: ignore[misc]
        if not (super_ or repl):
            problems.append(f"{where}: role {source.user} lacks REPLICATION; run ALTER ROLE {source.user} REPLICATION")
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


def _multidimensional(conn: psycopg.Connection, table: TableRef, where: str) -> list[str]:
    """Array columns declared with several dimensions: Debezium 3.2 sends such an array as nulls, silently.

    Postgres does not enforce an array's declared dimensions, so this sees only what the DDL says
    (``int[][]``); docs/types.md lists the gap.
    """
    rows = conn.execute(
        "SELECT a.attname, a.attndims, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped AND a.attndims > 1",
        ('"' + table.namespace.replace('"', '""') + '"."' + table.table.replace('"', '""') + '"',),
    ).fetchall()
    return [
        f"{where}: table {table}: column {name} is declared as a {dims}-dimensional array ({kind}), which "
        "Debezium sends as an array of nulls; store it as jsonb, or as a one-dimensional array"
        for name, dims, kind in rows
    ]


def check_mariadb(source: SourceConfig, new: bool = True) -> list[str]:
    """The server settings, grants and tables capture needs; ``new``: the connector is yet to be made."""
    where = f"source {source.name} ({source.kind} {source.host}:{source.port})"
    try:
        conn = connect_mariadb(source, timeout_s=5, database=False)
    except pymysql.MySQLError as err:
        return [f"{where}: cannot connect as {source.user}: {err}"]
    problems = []
    with conn, conn.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image")
        log_bin, fmt, image = cur.fetchone()  # type: ignore[misc]
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


# MariaDB column types Debezium 3.2's DDL parser does not know: reading such a table's DDL fails the connector.
UNPARSEABLE_TYPES = {"inet4": "VARCHAR(15) or INT UNSIGNED", "inet6": "VARCHAR(39) or BINARY(16)"}


def _unparseable_columns(cur: pymysql.cursors.Cursor, source: SourceConfig, where: str, new: bool) -> list[str]:
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


def _gtid_problems(cur: pymysql.cursors.Cursor, where: str) -> list[str]:
    """A change's version is its GTID sequence number in domain 0 (cdcsync/events.py): check the server keeps it so."""
    cur.execute("SELECT @@gtid_domain_id, @@gtid_strict_mode, @@gtid_binlog_pos")
    domain, strict, binlog_pos = cur.fetchone()  # type: ignore[misc]
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


def run_preflight(config: Config, client: ConnectClient, sources: list[SourceConfig]) -> list[str]:
    problems = check_connect(client, config)
    reachable = not problems
    for source in sources:  # kind mysql is refused when the config loads
        if source.kind == "postgres":
            problems.extend(check_postgres(source))
        else:  # before its first snapshot, which reads every table's DDL
            problems.extend(check_mariadb(source, new=not reachable or client.get_config(source.name) is None))
    return problems
