"""Which connectors on Kafka Connect this deployment made: the ones ``connectors apply --prune`` may remove.

Kafka Connect is shared, by connectors people register by hand and by every
cdcsync deployment pointed at it, so a connector's name alone proves nothing.
Each connector ``connectors apply`` registers carries ``cdcsync.deployment``
(``connectors.render.MARKER``): the name of the deployment that made it, drawn
at random by its first apply and kept in ``<state dir>/deployment``
(``cdcsync.state.base_dir``). Configs that share a state directory are one
deployment, as their followers' state already is; two that share a Connect
worker need a ``state_dir`` each.

An **orphan** carries this deployment's name under a name that no source of
the config has: its source left the config. A connector without the key, or
with another deployment's name, is never one. A connector registered before
the key existed gets it from the next apply that still declares its source.

Removing an orphan (``connectors.remove.prune``) needs its database, which
the config no longer describes: it is read back from the connector's own
config (kind, host, port, database, user, slot, publication, tables, signal
table). The password is a ``${file:...}`` reference (``connectors.render``)
into the secrets file apply wrote, read here from ``connect.secrets_dir``;
without that file, ``CDCSYNC_SOURCE_<NAME>_PASSWORD``.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.connectors.render import CONNECTOR_CLASSES, MARKER, read_properties, secrets_dir
from cdcsync.sources import kind_of
from cdcsync.state import base_dir

FILE_REFERENCE = re.compile(r"^\$\{file:(?P<path>.+):(?P<key>[^:]+)\}$")
UNESCAPED_COMMA = re.compile(r"(?<!\\),")


@dataclass
class Orphan:
    """A connector of this deployment whose source left the config; ``source`` rebuilt from its config."""

    name: str
    config: dict[str, str]
    source: SourceConfig | None  # None when its config does not say enough: ``problem`` says what
    problem: str | None = None

    def holds(self) -> list[str]:
        """What its capture keeps in the database until it is removed, worst first."""
        if self.source is not None:
            return held(self.source)
        kind = _kind_of_class(self.config.get("connector.class", ""))
        found = kind_of(kind).capture.held_in(self.config) if kind is not None else []
        if self.config.get("signal.data.collection"):
            found.append(f"signal table {self.config['signal.data.collection']}")
        return found


def held(source: SourceConfig) -> list[str]:
    """What a source's capture keeps in its database until ``connectors.remove`` drops it, worst first."""
    return [*kind_of(source).capture.held(source), f"signal table {source.signal_table}"]


def id_file(config: Config) -> Path:
    return base_dir(config) / "deployment"


def deployment_id(config: Config, create: bool = True) -> str | None:
    """This deployment's name (module docstring); made and kept on first use, None if not made and not ``create``."""
    path = id_file(config)
    if path.exists() or not create:
        return path.read_text(encoding="utf-8").strip() if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    made = f"{socket.gethostname()}:{path.parent.resolve()}:{uuid.uuid4().hex[:12]}"  # readable in Connect's UI
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another apply of the same deployment made it first
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(made + "\n")
    return made


def orphans(config: Config, client: ConnectClient) -> list[Orphan]:
    """The connectors this deployment made whose source is no longer in the config, by name."""
    mine = deployment_id(config, create=False)
    if mine is None:  # no apply has run for this deployment: no connector carries its name
        return []
    declared = {s.name for s in config.sources}
    found = []
    for name, values in sorted(client.configs().items()):
        if values.get(MARKER) != mine or name in declared:
            continue
        try:
            found.append(Orphan(name, values, rebuild(name, values, config)))
        except ValueError as err:
            found.append(Orphan(name, values, None, f"connector {name}: {err}"))
    return found


def rebuild(name: str, values: dict[str, str], config: Config) -> SourceConfig:
    """The source connector ``name`` was rendered from, as far as removing its capture needs (module docstring)."""
    kind = _kind_of_class(values.get("connector.class", ""))
    if kind is None:
        raise ValueError(f"connector.class {values.get('connector.class')!r} is none that cdcsync registers")
    missing = [k for k in ("database.hostname", "database.port", "database.user") if not values.get(k)]
    signal = values.get("signal.data.collection", "")
    if "." not in signal:
        missing.append("signal.data.collection")
    if missing:
        raise ValueError(f"its config lacks {', '.join(missing)}: cannot tell where its database is")
    signal_namespace = _unquote(signal.rsplit(".", 1)[0])
    fields: dict[str, object] = {
        "name": name,
        "kind": kind,
        "host": values["database.hostname"],
        "port": values["database.port"],
        "user": values["database.user"],
        "password": password(name, values.get("database.password", ""), config),
        "tables": _tables(values.get("table.include.list", ""), signal_namespace),
        **kind_of(kind).capture.rebuilt(values, signal_namespace),  # its database, slot, publication
    }
    try:
        return SourceConfig.model_validate(fields)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"its config does not describe a source cdcsync can reach ({problems})") from None


def password(name: str, value: str, config: Config) -> str:
    """The database password a connector's ``database.password`` stands for (module docstring)."""
    reference = FILE_REFERENCE.match(value)
    if not value.startswith("${"):
        return value
    variable = f"CDCSYNC_SOURCE_{name.upper()}_PASSWORD"
    inside = Path(config.connect.secrets_dir_in_connect or secrets_dir(config))
    if reference and Path(reference["path"]).parent == inside:  # a file apply wrote, not one provisioned by hand
        path = secrets_dir(config) / Path(reference["path"]).name
        try:
            held = read_properties(path.read_text(encoding="utf-8"))
        except OSError:
            held = {}
        if reference["key"] in held:
            return held[reference["key"]]
    if os.environ.get(variable):
        return os.environ[variable]
    raise ValueError(
        f"its database password {value} cannot be read here (secrets dir {secrets_dir(config)}); set {variable}"
    )


def _kind_of_class(connector_class: str) -> str | None:
    """The kind whose Debezium connector has this class, or None."""
    return next((kind for kind, cls in CONNECTOR_CLASSES.items() if cls == connector_class), None)


def _unquote(part: str) -> str:
    """A namespace as ``cdcsync.names.debezium_id`` wrote it, unquoted."""
    if len(part) > 1 and part.startswith('"') and part.endswith('"'):
        return part[1:-1].replace('""', '"')
    return part


def _tables(include_list: str, namespace: str) -> list[dict[str, str]]:
    """The tables of a ``table.include.list`` rendered by cdcsync (``re.escape``d, commas escaped).

    A dot inside a name and the one between namespace and table are both ``\\.``: the signal table's
    namespace, when an entry starts with it, tells them apart; otherwise the first dot splits. Only
    the tables' topic names depend on the split, and they come out the same either way.
    """
    tables = []
    prefix = re.escape(namespace) + r"\."
    for entry in UNESCAPED_COMMA.split(include_list):
        if not entry:
            continue
        if entry.startswith(prefix):
            space, table = namespace, entry[len(prefix) :]
        else:
            space, _, table = entry.partition(r"\.")
            space = re.sub(r"\\(.)", r"\1", space)
        tables.append({"namespace": space, "table": re.sub(r"\\(.)", r"\1", table)})
    if not tables:
        raise ValueError("its table.include.list is empty: cannot tell its tables")
    return tables
