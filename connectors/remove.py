"""``cdcsync connectors delete`` and ``apply --prune``: a source's capture removed for good, with what it leaves.

Deleting a connector in Kafka Connect alone leaves its Postgres replication
slot, which keeps every WAL segment from then on until the database's disk
fills. So, in order:

0. the database is reached first: when it cannot be, nothing is removed and
   the error names what stays (the connector is where its slot is written
   down, so it is kept for the next run);
1. the connector is deleted, and its tasks waited for: a slot stays active
   for as long as the old task's connection lives;
2. Postgres: the slot is dropped once inactive, then the publication;
3. the signal table cdcsync made (both databases);
4. with ``topics``, the source's topics (tables, heartbeat, signals,
   transactions, schema history) and the connector's secrets file.

``delete`` takes a source of the config. ``prune`` takes the orphans of
``connectors.owned``, connectors this deployment made whose source left the
config, each with its source read back from its connector config, and runs
the same steps.

Refused while a follower in the config still reads the source (for an
orphan: names one of its tables): its stream would stop at the last change
captured and look caught up. ``force`` removes anyway. Each step that finds
nothing to do says so; running it twice is safe.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.apply import client_for
from cdcsync.connectors.client import ConnectClient
from cdcsync.connectors.owned import Orphan, held
from cdcsync.connectors.render import secrets_file
from cdcsync.connectors.topics import admin, delete_topics, existing_topics, topic_specs
from cdcsync.errors import ConfigError, FatalError
from cdcsync.sources import kind_of


@dataclass
class Removed:
    source: str
    done: list[str] = field(default_factory=list)  # one line per step, what it did or found

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Pruned:
    """What ``prune`` did with one orphan (``connectors.owned``)."""

    connector: str
    action: str  # pruned | kept (an error stopped it) | would prune (dry run) | orphaned (not asked to prune)
    done: list[str] = field(default_factory=list)  # the steps taken, as ``Removed.done``
    held: list[str] = field(default_factory=list)  # what its capture still holds (or would lose, dry run)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def readers(config: Config, source: SourceConfig) -> list[str]:
    """The followers of the config that read a table of ``source``."""
    return [f.name for f in config.followers if any(s.name == source.name for s, _ in config.followed_tables(f))]


def delete(
    config: Config, name: str, topics: bool = False, force: bool = False, client: ConnectClient | None = None
) -> Removed:
    """Remove source ``name``'s capture (module docstring); ``ConfigError`` for an unknown source or one still read."""
    source = next((s for s in config.sources if s.name == name), None)
    if source is None:
        known = ", ".join(s.name for s in config.sources) or "none"
        raise ConfigError([f"connectors delete {name}: no such source in the config (sources: {known})"])
    followed_by = [] if force else readers(config, source)
    if followed_by:
        raise ConfigError([
            f"connectors delete {name}: followers {', '.join(followed_by)} still read it; remove its tables from "
            "them (or the source from the config) first, or pass --force"
        ])  # fmt: skip
    return _remove(config, source, topics, client or client_for(config))


def orphan_readers(config: Config, orphan: Orphan) -> list[str]:
    """The followers of the config that name a table of an orphan's source (``followers[].tables``)."""
    return [f.name for f in config.followers if any(t.startswith(f"{orphan.name}.") for t in f.tables or [])]


def refuse_read(config: Config, orphans: list[Orphan]) -> None:
    """``ConfigError`` naming each orphan a follower of the config still reads; checked before anything changes."""
    problems = [
        f"connectors apply --prune: followers {', '.join(names)} still read source {o.name}, which is no longer "
        "in the config; remove its tables from them first, or pass --force"
        for o in orphans
        if (names := orphan_readers(config, o))
    ]
    if problems:
        raise ConfigError(problems)


def prune(
    config: Config,
    orphans: list[Orphan],
    topics: bool = False,
    force: bool = False,
    dry_run: bool = False,
    client: ConnectClient | None = None,
) -> list[Pruned]:
    """Remove each orphan's capture as ``delete`` removes a source's (module docstring).

    An orphan that cannot be removed (its database unreachable, its config unreadable) is ``kept``
    with the error, and the others go on; the caller fails the command when any is kept.
    """
    if not force:
        refuse_read(config, orphans)
    client = client or client_for(config)
    results = []
    for orphan in orphans:
        if orphan.source is None:
            error = f"{orphan.problem}; connector {orphan.name} is kept, and so is what it holds in its database"
            results.append(Pruned(orphan.name, "kept", held=[f"connector {orphan.name}", *orphan.holds()], error=error))
        elif dry_run:
            present = _present_topics(config, orphan.source) if topics else []
            would = [f"connector {orphan.name}", *orphan.holds(), *(f"topic {t}" for t in present)]
            results.append(Pruned(orphan.name, "would prune", held=would))
        else:
            try:
                results.append(Pruned(orphan.name, "pruned", _remove(config, orphan.source, topics, client).done))
            except FatalError as err:
                still = [f"connector {orphan.name}"] if client.status(orphan.name) is not None else []
                results.append(Pruned(orphan.name, "kept", held=[*still, *orphan.holds()], error=str(err)))
    return results


def _remove(config: Config, source: SourceConfig, topics: bool, client: ConnectClient) -> Removed:
    name = source.name
    where = f"{source.kind} database {source.database} at {source.host}:{source.port}"
    registered = client.status(name) is not None
    unreachable = _unreachable(source)
    if unreachable:
        stays = ", ".join([*([f"connector {name}"] if registered else []), *held(source)])
        raise FatalError(
            f"source {name}: its {where} cannot be reached ({unreachable}). Nothing was removed; still there: "
            f"{stays}. Make the database reachable and run this again; if it is gone for good, so are they: "
            f"delete the connector alone (DELETE {client.url}/connectors/{name})"
        )
    removed = Removed(name)
    if not registered:
        removed.done.append(f"connector {name}: not registered")
    else:
        client.delete(name)
        _gone(client, name)
        removed.done.append(f"connector {name}: deleted")
    try:
        removed.done += kind_of(source).capture.remove(source)
    except FatalError:
        raise
    except Exception as err:  # the database went away between the check and the steps
        raise FatalError(
            f"source {name}: connector {name} deleted, but its {where} failed before everything was removed "
            f"({_first_line(err)}); what may remain there: {', '.join(held(source))}. Drop them by hand "
            f"({_drop_sql(source)})"
        ) from err
    if topics:
        present = _present_topics(config, source)
        delete_topics(config, present)
        removed.done.append(f"topics: deleted {', '.join(present)}" if present else "topics: none left")
        secrets = secrets_file(source, config)
        if secrets.exists():
            secrets.unlink()
            removed.done.append(f"secrets file {secrets}: removed")
    return removed


def _present_topics(config: Config, source: SourceConfig) -> list[str]:
    with admin(config) as kafka_admin:
        return sorted({spec.name for spec in topic_specs(source)} & existing_topics(kafka_admin))


def _unreachable(source: SourceConfig) -> str | None:
    """Why the source's database does not answer its user, or None when it does."""
    try:
        kind_of(source).connect(source).close()
    except Exception as err:  # the drivers' errors share no base: any failure to connect is the answer
        return _first_line(err)
    return None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _drop_sql(source: SourceConfig) -> str:
    return kind_of(source).capture.drop_sql(source)


def _gone(client: ConnectClient, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.status(name) is not None:
        if time.monotonic() > deadline:
            raise FatalError(f"connector {name}: still listed by Kafka Connect {timeout_s:.0f}s after its deletion")
        time.sleep(0.5)
