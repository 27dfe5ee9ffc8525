"""Turn a source's config into the Debezium connector config Kafka Connect receives.

The defaults per kind are data in ``templates/<kind>.json``; ``${field}``
placeholders are filled from the source, and the source's ``debezium:`` map
overrides any key last. The result is plain ``str -> str``, the shape Connect
stores, so a re-apply can be compared key by key.

Secrets never travel in the connector config, which Connect stores in its
config topic and serves at ``GET /connectors/<name>/config``. Every key that
looks secret (``cdcsync.config.SECRET_KEY``: ``database.password``, a
``debezium:`` ``...password``, a ``sasl.jaas.config``) is rendered as
``${file:<secrets_dir_in_connect>/<source>.properties:<key>}``, a reference
Kafka's ``FileConfigProvider`` resolves inside the worker when the connector
starts and when Connect validates it. ``secret_properties`` is that file's
content, written by ``connectors.apply`` (mode 0600). A value that already is
a reference (``${vault:...}``, ``${env:...}``) is left as the user wrote it.

Every connector apply registers also carries ``cdcsync.deployment`` (``MARKER``),
naming the deployment that made it (``connectors.owned``): how ``connectors apply
--prune`` tells its own connectors from the others on a shared Connect. Connect
keeps a key it does not know in the connector's config and Debezium ignores it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template

from cdcsync.config import SECRET_KEY, Config, SourceConfig
from cdcsync.names import debezium_id
from cdcsync.sources import KINDS, kind_of
from cdcsync.state import state_dir

CONNECTOR_CLASSES = {name: kind.capture.connector_class for name, kind in KINDS.items()}  # by kind's name
SECRET_KEYS = SECRET_KEY
MARKER = "cdcsync.deployment"  # the deployment that registered the connector (connectors.owned)
PROVIDER_REFERENCE = re.compile(r"^\$\{[a-z0-9_-]+:.*\}$", re.IGNORECASE)


@cache
def template(kind: str) -> dict[str, str]:
    name = kind_of(kind).capture.template
    raw = json.loads(resources.files("cdcsync.connectors").joinpath(f"templates/{name}.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def secrets_dir(config: Config) -> Path:
    """Where cdcsync writes the connectors' secret files (``connect.secrets_dir``).

    By default the machine's state directory (``CDCSYNC_STATE_DIR``), where the
    local Connect worker's ``FileConfigProvider`` may read (its ``allowed.paths``),
    never the config's ``state_dir``: that one holds a deployment's followers,
    and Connect is shared by every deployment on the machine.
    """
    if config.connect.secrets_dir:
        return Path(config.connect.secrets_dir)
    return state_dir() / "connect-secrets"


def secrets_file(source: SourceConfig, config: Config, pending: bool = False) -> Path:
    """The source's secrets file as cdcsync writes it; ``pending`` is the copy validated before it replaces it."""
    return secrets_dir(config) / f"{source.name}.properties{'.pending' if pending else ''}"


def secrets_file_in_connect(source: SourceConfig, config: Config, pending: bool = False) -> str:
    """The same file as the Connect worker sees it: the path in the ``${file:...}`` references."""
    inside = config.connect.secrets_dir_in_connect
    path = (
        Path(inside) / secrets_file(source, config, pending).name if inside else secrets_file(source, config, pending)
    )
    return str(path)


def is_secret(key: str, value: str) -> bool:
    return bool(SECRET_KEY.search(key)) and bool(value) and not PROVIDER_REFERENCE.match(value)


def render(
    source: SourceConfig, config: Config, pending: bool = False, deployment: str | None = None
) -> dict[str, str]:
    """The connector config Connect receives: every secret a ``${file:...}`` reference (module docstring).

    ``deployment`` (``connectors.owned.deployment_id``) is set as ``MARKER``, after the source's own
    ``debezium:`` keys: a config cannot claim another deployment's connector.
    """
    ref = secrets_file_in_connect(source, config, pending)
    rendered = {k: (f"${{file:{ref}:{k}}}" if is_secret(k, v) else v) for k, v in _render_clear(source, config).items()}
    if deployment is not None:
        rendered[MARKER] = deployment
    return rendered


def secret_properties(source: SourceConfig, config: Config) -> dict[str, str]:
    """The secrets ``render`` refers to, by connector key: the content of the source's secrets file."""
    return {k: v for k, v in _render_clear(source, config).items() if is_secret(k, v)}


def properties_text(values: dict[str, str]) -> str:
    """``values`` in Java ``.properties`` syntax, escaped so ``Properties.load`` reads back exactly them."""
    return "".join(f"{_escape(k, key=True)}={_escape(v)}\n" for k, v in sorted(values.items()))


def read_properties(text: str) -> dict[str, str]:
    """What ``properties_text`` wrote, read back: one ``key=value`` a line, ``#``/``!`` comments skipped.

    Enough of ``java.util.Properties.load`` for the files cdcsync writes (no continuation lines).
    """
    values = {}
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped[0] in "#!":
            continue
        key: list[str] = []
        value: list[str] = []
        in_key, i = True, 0
        while i < len(stripped):
            char = stripped[i]
            if char == "\\" and i + 1 < len(stripped):
                nxt = stripped[i + 1]
                if nxt == "u" and i + 5 < len(stripped):
                    char, i = chr(int(stripped[i + 2 : i + 6], 16)), i + 4
                else:
                    char = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}.get(nxt, nxt)
                i += 2
                (key if in_key else value).append(char)
                continue
            if in_key and char in "=:":
                in_key = False
            else:
                (key if in_key else value).append(char)
            i += 1
        # \uXXXX escapes are UTF-16 code units: a character past U+FFFF arrives as a surrogate pair.
        values[_utf16("".join(key))] = _utf16("".join(value))
    return values


def _utf16(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16")


def _escape(text: str, key: bool = False) -> str:
    out = []
    for i, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or i == 0)):
            out.append("\\" + char)
        elif char in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[char])
        elif " " <= char <= "~":
            out.append(char)
        else:  # \uXXXX, as UTF-16 code units: whatever charset the reader assumes
            data = char.encode("utf-16-be")
            out.extend(f"\\u{data[j : j + 2].hex()}" for j in range(0, len(data), 2))
    return "".join(out)


# The MariaDB connector's own internal.schema.history.internal.ddl.filter (3.5.0): statements its binlog
# reader skips unparsed (server-made temporary-table drops, managed-service heartbeats, relay log flushes,
# savepoints, MariaDB's dummy events, TRUNCATE, REPLACE, grants, users and roles, views and routines).
# Setting the property replaces them, so they are kept, one regex each, and ours added.
DEBEZIUM_DDL_FILTER = (
    r"DROP TEMPORARY TABLE IF EXISTS .+ /\* generated by server \*/",
    r"(SET STATEMENT .*)?INSERT INTO (mysql\.)?rds_heartbeat2\(.*\) values \(.*\) ON DUPLICATE KEY UPDATE value = .*",
    r"(SET STATEMENT .*)?DELETE FROM (mysql\.)?rds_sysinfo.*",
    r"(SET STATEMENT .*)?INSERT INTO (mysql\.)?rds_sysinfo\(.*\) values \(.*\)",
    r"(SET STATEMENT .*)?INSERT INTO (mysql\.)?rds_monitor\(.*\) values \(.*\) ON DUPLICATE KEY UPDATE value = .*",
    r"(SET STATEMENT .*)?INSERT INTO (mysql\.)?rds_monitor\(.*\) values \(.*\)",
    r"(SET STATEMENT .*)?DELETE FROM (mysql\.)?rds_monitor.*",
    "FLUSH RELAY LOGS.*",
    "flush relay logs.*",
    "SAVEPOINT .*",
    r"^\s*#\s*Dummy event.*",
    "(SET STATEMENT .*)?TRUNCATE TABLE .*",
    "(SET STATEMENT .*)?REPLACE INTO .*",
    r"^(?:SET STATEMENT\s+.*?FOR\s+)?(?:GRANT|REVOKE)\s+.*",
    r"^(?:SET STATEMENT\s+.*?FOR\s+)?(?:ANALYZE|OPTIMIZE|REPAIR)\s+(?:NO_WRITE_TO_BINLOG\s+|LOCAL\s+)?TABLE\s+.*",
    r"^(?:SET STATEMENT\s+.*?FOR\s+)?(CREATE|ALTER|DROP)\s+(?:OR\s+REPLACE\s+)?(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"(USER|ROLE)\b.*",
    r"^(?:SET STATEMENT\s+.*?FOR\s+)?(CREATE|ALTER|DROP)\s+(?:OR\s+REPLACE\s+)?(?:ALGORITHM\s*=\s*[^\s]+\s+)?"
    r"(?:DEFINER\s*=\s*[^\s]+\s+)?(?:SQL\s+SECURITY\s+[^\s]+\s+)?(VIEW|FUNCTION|PROCEDURE|TRIGGER)\s+.*",
)
UNPARSEABLE_TYPE_WORDS = ("inet4", "inet6")  # MariaDB types Debezium's grammar lacks (connectors.preflight)


def ddl_filter(source: SourceConfig) -> str:
    """Debezium's DDL filter, plus: a statement naming a type its parser lacks and none of the captured tables.

    Such a statement (a table made with an INET6 column in a captured database, say) would fail the connector
    and fail it again after every restart. Skipped, the connector never learns that table, which it does not
    capture. A statement that names a captured table is still parsed, so an ALTER that gives one such a column
    stops capture loudly (connectors.watch) instead of leaving it reading rows with the wrong columns. Debezium
    matches each regex against the whole statement, case-insensitively, and splits the list at commas.
    """
    names = "|".join(sorted({re.escape(t.table) for t in source.tables}))
    types = "|".join(UNPARSEABLE_TYPE_WORDS)
    ours = rf"(?!.*\b(?:{names})\b).*\b(?:{types})\b.*"
    return ",".join(pattern.replace(",", "\\,") for pattern in (*DEBEZIUM_DDL_FILTER, ours))


def _render_clear(source: SourceConfig, config: Config) -> dict[str, str]:
    values = {
        "name": source.name,
        "host": source.host,
        "port": str(source.port),
        "user": source.user,
        "password": source.password.get_secret_value(),
        "database": source.database,
        "slot": source.slot or "",
        "publication": source.publication or "",
        "server_id": str(source.server_id or ""),
        "snapshot_mode": source.snapshot_mode,
        "heartbeat_interval_ms": str(source.heartbeat_interval_ms),
        # Debezium include lists are regular expressions: anchor and escape.
        "table_include_list": ",".join(re.escape(str(t)).replace(",", "\\,") for t in source.tables),
        "database_include_list": ",".join(sorted({re.escape(t.namespace) for t in source.tables})),
        "bootstrap_servers": config.kafka.bootstrap_servers,
        "schema_history_topic": source.schema_history_topic,
        "signal_table": debezium_id(
            source.signal_table.namespace, source.signal_table.table
        ),  # connectors.signals: snapshots of tables added later
        "ddl_filter": ddl_filter(source),
    }
    rendered = {k: Template(v).substitute(values) for k, v in template(source.kind).items()}
    rendered["connector.class"] = kind_of(source).capture.connector_class
    if "schema.history.internal.kafka.bootstrap.servers" in rendered:  # its own producer and consumer (SASL/SSL)
        for key, value in config.kafka.java_properties.items():
            rendered[f"schema.history.internal.producer.{key}"] = value
            rendered[f"schema.history.internal.consumer.{key}"] = value
    rendered.update(source.debezium)
    return rendered


def redact(connector_config: dict[str, str]) -> dict[str, str]:
    return {k: ("********" if SECRET_KEYS.search(k) else v) for k, v in connector_config.items()}
