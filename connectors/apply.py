"""Apply the declared connectors to Kafka Connect: all or nothing, idempotent.

Order: render every connector, run the pre-flight checks (the sources, Connect,
and what ``connectors.source_setup`` finds each Postgres table lacks), let
Connect validate every config, and only then write: the signal tables, the
replica identities and publication options of ``source_setup``, the topics,
and last each config's PUT. A failure in any check changes nothing, in a
database or in Connect. A PUT of an unchanged config is
skipped, so applying twice changes nothing and says so.

Secrets (``connectors.render``): each source's secrets go to a ``.pending``
file (mode 0600) that the configs Connect validates refer to; only after
every validation passed does it replace the source's secrets file, just
before that source's PUT. A running connector therefore never reads a secret
that failed validation. The configs compared are the rendered ones, references
included; a changed secret (same reference, new file content) counts as a
change of its key: the config is PUT again and the connector and its tasks
restarted, so they resolve the new value.

Every config carries this deployment's name (``connectors.owned``), so that
``--prune`` (``connectors.remove.prune``) later knows the connectors apply
made from those it did not. A connector registered before that key existed
gets it, once, as a change like any other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.connectors import partitions, restore, signals, source_setup
from cdcsync.connectors.client import ConnectClient
from cdcsync.connectors.offsets import create
from cdcsync.connectors.owned import deployment_id
from cdcsync.connectors.preflight import run_preflight
from cdcsync.connectors.render import properties_text, redact, render, secret_properties, secrets_file
from cdcsync.connectors.topics import ensure_topics, topic_specs
from cdcsync.errors import ConfigError, PreflightError
from cdcsync.state import base_dir, write_private


@dataclass
class ApplyResult:
    connector: str
    action: str  # created | updated | unchanged
    changed_keys: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    snapshot: list[str] = field(default_factory=list)  # tables added to a running connector, snapshot signalled
    warnings: list[str] = field(default_factory=list)
    source_changes: list[str] = field(default_factory=list)  # what apply changed in the database (source_setup)

    def as_dict(self) -> dict[str, Any]:
        return {
            "connector": self.connector,
            "action": self.action,
            "changed": self.changed_keys,
            "topics": self.topics,
            "snapshot": self.snapshot,
            "warnings": self.warnings,
            "source_changes": self.source_changes,
        }


def client_for(config: Config) -> ConnectClient:
    return ConnectClient(config.connect.url, config.connect.timeout_s)


def select(config: Config, names: list[str] | None) -> list[SourceConfig]:
    return [config.source(n) for n in names] if names else list(config.sources)


def apply(config: Config, names: list[str] | None = None, client: ConnectClient | None = None) -> list[ApplyResult]:
    client = client or client_for(config)
    sources = select(config, names)
    if not sources:
        raise ConfigError(["sources: nothing to apply; declare at least one source"])
    deployment = deployment_id(config)
    rendered = {s.name: render(s, config, deployment=deployment) for s in sources}
    secrets = {s.name: secret_properties(s, config) for s in sources}

    problems = run_preflight(config, client, sources)
    setups = {s.name: source_setup.plan(s) for s in sources}
    added: dict[str, list[TableRef]] = {}
    for source in sources:  # before anything is registered: a table the running connector could not add
        problems += setups[source.name].problems
        current = client.get_config(source.name)
        added[source.name] = signals.added_tables(source, current)
        problems += signals.unknown_schemas(source, current or {}, added[source.name])
        problems += signals.unsignalable(source, added[source.name])
        not_owned = signals.signal_table_problem(source)
        if not_owned:
            problems.append(not_owned)
    if problems:
        raise PreflightError(problems)
    invalid = []
    try:
        for source in sources:
            if secrets[source.name]:
                text = properties_text(secrets[source.name])
                write_private(secrets_file(source, config, pending=True), text, to_dir_owner=True)
            pending = render(source, config, pending=True, deployment=deployment)
            for key, errors in client.validate(pending["connector.class"], {**pending, "name": source.name}).items():
                invalid.append(f"connector {source.name}: {key}: {'; '.join(errors)}")
    except BaseException:
        _drop_pending(config, sources)
        raise
    if invalid:
        _drop_pending(config, sources)
        raise ConfigError(invalid)

    # Every check passed: only now does apply write into the sources (docs/capture.md, "What apply changes").
    warnings: dict[str, list[str]] = {}
    for source in sources:
        missing = signals.create_signal_table(source)
        if missing and (added[source.name] or signals.pending(base_dir(config), source)):
            tables = ", ".join(map(str, added[source.name])) or "added earlier"
            problems.append(f"{missing}; it is needed to snapshot the tables added: {tables}")
        elif missing:
            warnings[source.name] = [f"{missing}; until then a table added to this source cannot be snapshotted"]
    if problems:
        _drop_pending(config, sources)
        raise PreflightError(problems)
    changes = {s.name: source_setup.carry_out(s, setups[s.name]) for s in sources}

    results = []
    for source in sources:
        topics = ensure_topics(config, topic_specs(source))
        desired = rendered[source.name]
        file, pending = secrets_file(source, config), secrets_file(source, config, pending=True)
        rotated = _changed_secrets(file, secrets[source.name])
        if secrets[source.name]:
            os.replace(pending, file)
        current = client.get_config(source.name)
        if current is None:
            action = create(client, source, desired)  # never on a deleted connector's offsets (connectors.offsets)
            partitions.remember(config, source)  # the initial snapshot reads every partition there is now
            results.append(
                ApplyResult(
                    source.name,
                    action,
                    sorted(desired),
                    topics,
                    [],
                    warnings.get(source.name, []),
                    changes[source.name],
                )
            )
            continue
        went_back = restore.check(client, source)
        if went_back:
            raise PreflightError([went_back])
        current = {k: v for k, v in current.items() if k != "name"}
        changed = sorted({k for k in set(desired) | set(current) if desired.get(k) != current.get(k)} | rotated)
        added = signals.added_tables(source, current)
        if added:  # recorded before the PUT: a kill after it must not leave them unsnapshotted (connectors.signals)
            signals.record_pending(base_dir(config), source, added)
        if changed:
            client.put_config(source.name, desired)
            if rotated:  # the references did not change, so the tasks would keep the secret they resolved
                client.restart_all(source.name)
        snapshot = [str(t) for t in signals.snapshot_added(config, client, source, desired)]
        partitions.remember(config, source, only=snapshot)  # an added table's partitions: in its snapshot
        results.append(
            ApplyResult(
                source.name,
                "updated" if changed else "unchanged",
                changed,
                topics,
                snapshot,
                warnings.get(source.name, []),
                changes[source.name],
            )
        )
    return results


def _drop_pending(config: Config, sources: list[SourceConfig]) -> None:
    for source in sources:
        secrets_file(source, config, pending=True).unlink(missing_ok=True)


def _changed_secrets(file: Path, wanted: dict[str, str]) -> set[str]:
    """Keys whose secret differs from what ``file`` holds now (names only, never values)."""
    if not wanted:
        return set()
    try:
        held = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return set(wanted)
    if held == properties_text(wanted):
        return set()
    lines = set(held.splitlines())
    return {k for k, v in wanted.items() if properties_text({k: v}).rstrip("\n") not in lines}


def status(config: Config, names: list[str] | None = None, client: ConnectClient | None = None) -> list[dict[str, Any]]:
    """Connector and task state for each declared source ('MISSING' when not registered)."""
    client = client or client_for(config)
    report: list[dict[str, Any]] = []
    for source in select(config, names):
        st = client.status(source.name)
        if st is None:
            report.append({"connector": source.name, "state": "MISSING", "worker": None, "tasks": []})
            continue
        tasks = [
            {
                "id": t["id"],
                "state": t["state"],
                "worker": t.get("worker_id"),
                **({"trace": t["trace"].splitlines()[0]} if t.get("trace") else {}),
            }
            for t in st.get("tasks", [])
        ]
        report.append(
            {
                "connector": source.name,
                "state": st["connector"]["state"],
                "worker": st["connector"].get("worker_id"),
                "tasks": tasks,
            }
        )
    return report


def healthy(report: list[dict[str, Any]]) -> bool:
    return all(
        r["state"] == "RUNNING" and r["tasks"] and all(t["state"] == "RUNNING" for t in r["tasks"]) for r in report
    )


__all__ = ["ApplyResult", "apply", "status", "healthy", "redact"]
