"""A table added to a running connector gets its existing rows into the log: Debezium's incremental snapshot.

A connector whose initial snapshot is done streams only changes. A table
added to ``sources[].tables`` later would reach its topic with the changes
made after ``connectors apply`` and none of the rows it already held, and
every follower, every ``bootstrap --from topics`` and every ``reindex`` would
lack them for good. So ``connectors apply`` asks capture for an incremental
snapshot of each added table (docs/schema-changes.md, "A table added"):

1. Each connector is configured with a signal table in the source
   (``signal.data.collection``, ``cdcsync_signal_<source>`` next to the source's
   first table), which apply creates if missing. Debezium also writes its snapshot
   windows' watermarks there.
2. Before the config with the new table is PUT, the added tables are recorded
   in ``<state>/capture/<source>.json``: an apply killed between the PUT and
   the signal finds them there next time, instead of treating the connector
   as "unchanged" and never snapshotting them.
3. After the PUT, apply waits until every task runs with the new include list
   (a task still on the old list would read the signal and skip the table),
   then inserts an ``execute-snapshot`` signal row and clears the record.

The snapshot is read in chunks while streaming goes on; Debezium drops a
chunk's row when a change of that key is streamed within the chunk's window,
so the topic ends with every row once, ranked by the versions of
``cdcsync.events`` (an incremental snapshot row sits at the transaction it is
emitted in). A follower reads the new topic from its beginning
(``sync.stream``): that is the bootstrap of that table alone, while its other
tables keep streaming.

``cdcsync connectors snapshot SOURCE --table T`` sends the same signal by hand.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.connectors.client import ConnectClient
from cdcsync.errors import ConfigError, RetryableError
from cdcsync.sources import kind_of

INCLUDE_LIST = "table.include.list"
SIGNAL_DATA = 2048  # the data column of the signal table create_signal_table makes


def include_entry(table: TableRef) -> str:
    """A table as the connector's include list names it (anchored regular expressions, so escaped)."""
    return re.escape(str(table))


def added_tables(source: SourceConfig, current: dict[str, str] | None) -> list[TableRef]:
    """Tables of ``source`` that the connector's current config does not capture (none for a new connector)."""
    if current is None:
        return []
    captured = set(filter(None, current.get(INCLUDE_LIST, "").split(",")))
    return [t for t in source.tables if include_entry(t) not in captured]


# A name Debezium's table id parser reads unquoted and a regex takes literally ('$' is an anchor: quoted).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")
# Where Java's regex syntax is stricter than Python's: a lone brace (an "illegal repetition") or backslash.
REGEX_DIFFERENCES = re.compile(r"[{}\\]")


def unknown_schemas(source: SourceConfig, current: dict[str, str], added: list[TableRef]) -> list[str]:
    """Added tables the running connector could not take: it would fail on their first change (MariaDB: a table
    its schema history never recorded). Such a connector must be created anew (a full snapshot)."""
    return kind_of(source).capture.unknown_schemas(source, current, added)


def signal_table_problem(source: SourceConfig) -> str | None:
    """Why the existing signal table cannot serve (Postgres: the source's user does not own it), read only.

    A filtered publication holds only tables its user owns, and Debezium
    writes its watermarks into the signal table as that user: one it does not
    own fails the connector. A missing table is no problem here:
    ``create_signal_table`` creates it once every check has passed.
    """
    if _owned(source) is False:
        table = _quoted(source, source.signal_table)
        return (
            f"source {source.name}: {source.user} does not own the signal table {source.signal_table}, so Debezium "
            f"cannot add it to publication {source.publication}; run ALTER TABLE {table} OWNER TO {source.user}"
        )
    return None


def create_signal_table(source: SourceConfig) -> str | None:
    """Create the source's signal table when missing: None when it is there, else why it could not be made.

    Created as the source's user, who must be able to insert into it and, on
    Postgres, own it. A user without CREATE on the schema is not refused: only
    adding a table needs signals, and ``connectors apply`` refuses that, with
    this line, while the table is missing.
    """
    table = _quoted(source, source.signal_table)
    ddl = f"CREATE TABLE {table} (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR({SIGNAL_DATA}))"
    try:
        if _owned(source) is None:
            kind_of(source).fetch(source, ddl)
        return None
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
        return (
            f"source {source.name}: no signal table {source.signal_table}, and {source.user} cannot create it "
            f"({type(err).__name__}: {first}); as an administrator run: {ddl}; then make {source.user} its owner "
            "(Postgres) or grant it SELECT and INSERT on it (MariaDB)"
        )


def request_snapshot(source: SourceConfig, tables: list[TableRef], where: str | None = None) -> str:
    """Insert an ``execute-snapshot`` signal for ``tables`` (only their rows matching SQL ``where``, if given);
    returns the signal's id."""
    unknown = [str(t) for t in tables if t not in source.tables]
    if unknown:
        raise ConfigError([f"source {source.name}: does not capture {unknown}; add them to sources[].tables first"])
    signal_id = f"cdcsync-{uuid.uuid4()}"
    table = _quoted(source, source.signal_table)
    data = signal_data(tables, where)
    kind_of(source).fetch(
        source, f"INSERT INTO {table} (id, type, data) VALUES (%s, 'execute-snapshot', %s)", (signal_id, data)
    )
    return signal_id


def signal_data(tables: list[TableRef], where: str | None = None) -> str:
    """The ``data`` of an ``execute-snapshot`` signal (at most ``SIGNAL_DATA`` characters fit the signal table)."""
    signal: dict[str, object] = {"data-collections": [data_collection(t) for t in tables], "type": "incremental"}
    if where:  # each condition's data-collection is a regex matched against the entry as Debezium expanded it
        signal["additional-conditions"] = [
            {"data-collection": "\\Q" + data_collection(t) + "\\E", "filter": f"({where})"} for t in tables
        ]
    return json.dumps(signal)


def data_collection(table: TableRef) -> str:
    """A table as a signal's ``data-collections`` names it, so that Debezium finds that table.

    Debezium first matches each entry as a regex against every captured table's
    ``namespace.table`` and replaces it with the one it matches; then it parses
    the result as a table id, whose parts end at a dot or a space unless quoted.
    A plain name goes as it is. Any other (a dot, a space, a quote in it) goes
    double-quoted: as a regex that text matches no table (none has the quotes),
    so Debezium parses it as written, quotes and all (``unsignalable`` refuses
    a name that is no valid regex).
    """
    if PLAIN_NAME.fullmatch(table.namespace) and PLAIN_NAME.fullmatch(table.table):
        return f"{table.namespace}.{table.table}"
    return ".".join('"' + part.replace('"', '""') + '"' for part in (table.namespace, table.table))


def unsignalable(source: SourceConfig, added: list[TableRef]) -> list[str]:
    """Added tables whose name no snapshot signal can carry: Debezium compiles the entry as a Java regex."""
    refused = []
    for table in added:
        entry = data_collection(table)
        try:
            re.compile(entry)
            valid = not REGEX_DIFFERENCES.search(entry)
        except re.error:
            valid = False
        if not valid:
            refused.append(
                f"source {source.name}: cannot add {table} to the running connector: Debezium reads the table "
                f"named in a snapshot signal as a regex, and {entry} is not a valid one (a bracket, brace or "
                "backslash in the name), so its rows would never be snapshotted. Rename the table, or create the "
                f"connector anew with it (a full snapshot): DELETE /connectors/{source.name} on Kafka Connect, then "
                "`cdcsync connectors apply`"
            )
    return refused


def wait_for_tasks(client: ConnectClient, source: SourceConfig, desired: dict[str, str], timeout_s: float) -> None:
    """Wait until the connector and every task run with ``desired``'s include list."""
    deadline, seen = time.monotonic() + timeout_s, "no tasks"
    while time.monotonic() < deadline:
        tasks = client.tasks(source.name)
        status = client.status(source.name) or {}
        states = [t.get("state") for t in status.get("tasks", [])]
        lists = {t.get("config", {}).get(INCLUDE_LIST) for t in tasks}
        seen = f"tasks {states}, include lists {sorted(map(str, lists))}"
        if tasks and lists == {desired.get(INCLUDE_LIST)} and states and all(s == "RUNNING" for s in states):
            if (status.get("connector") or {}).get("state") == "RUNNING":
                return
        time.sleep(1)
    raise RetryableError(
        f"connector {source.name}: its tasks did not run the new table list within {timeout_s:.0f}s ({seen}); "
        "the snapshot of the added tables stays pending: run `cdcsync connectors apply` again"
    )


def pending_file(base: Path, source: str) -> Path:
    return base / "capture" / f"{source}.json"


def pending(base: Path, source: SourceConfig) -> list[TableRef]:
    """Tables recorded for a snapshot not yet signalled (still captured by the source)."""
    path = pending_file(base, source.name)
    if not path.exists():
        return []
    names = set(json.loads(path.read_text()).get("snapshot", []))
    return [t for t in source.tables if str(t) in names]


def record_pending(base: Path, source: SourceConfig, tables: list[TableRef]) -> None:
    path = pending_file(base, source.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = sorted({*map(str, pending(base, source)), *map(str, tables)})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"source": source.name, "snapshot": names, "recorded_at": time.time()}))
    tmp.replace(path)


def clear_pending(base: Path, source: SourceConfig) -> None:
    pending_file(base, source.name).unlink(missing_ok=True)


def snapshot_added(
    config: Config, client: ConnectClient, source: SourceConfig, desired: dict[str, str], timeout_s: float = 120
) -> list[TableRef]:
    """Signal the snapshot of every pending table of ``source`` once its tasks run ``desired``; returns them."""
    from cdcsync.state import base_dir

    base = base_dir(config)
    tables = pending(base, source)
    if not tables:
        clear_pending(base, source)
        return []
    wait_for_tasks(client, source, desired, timeout_s)
    request_snapshot(source, tables)
    clear_pending(base, source)
    return tables


def _quoted(source: SourceConfig, table: TableRef) -> str:
    return kind_of(source).qualified(table)


def _owned(source: SourceConfig) -> bool | None:
    """None when the signal table is missing; else whether the source's user may use it (Postgres: owns it)."""
    return kind_of(source).capture.signal_table_usable(source)
