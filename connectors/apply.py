"""Apply the declared connectors to Kafka Connect: all or nothing, idempotent.

Order: render every connector, let Connect validate every config, run the
pre-flight checks, pre-create topics, and only then PUT each config. A failure
in any step before the PUTs registers nothing. A PUT of an unchanged config is
skipped, so applying twice changes nothing and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.connectors.preflight import run_preflight
from cdcsync.connectors.render import redact, render
from cdcsync.connectors.topics import ensure_topics, topic_specs
from cdcsync.errors import ConfigError, PreflightError


@dataclass
class ApplyResult:
    connector: str
    action: str  # created | updated | unchanged
    changed_keys: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"connector": self.connector, "action": self.action, "changed": self.changed_keys, "topics": self.topics}


def client_for(config: Config) -> ConnectClient:
    return ConnectClient(config.connect.url, config.connect.timeout_s)


def select(config: Config, names: list[str] | None) -> list[SourceConfig]:
    return [config.source(n) for n in names] if names else list(config.sources)


def apply(config: Config, names: list[str] | None = None, client: ConnectClient | None = None) -> list[ApplyResult]:
    client = client or client_for(config)
    sources = select(config, names)
    if not sources:
        raise ConfigError(["sources: nothing to apply; declare at least one source"])
    rendered = {s.name: render(s, config) for s in sources}

    problems = run_preflight(config, client, sources)
    if problems:
        raise PreflightError(problems)
    invalid = []
    for name, cfg in rendered.items():
        for key, errors in client.validate(cfg["connector.class"], {**cfg, "name": name}).items():
            invalid.append(f"connector {name}: {key}: {'; '.join(errors)}")
    if invalid:
        raise ConfigError(invalid)

    results = []
    for source in sources:
        topics = ensure_topics(config, topic_specs(source))
        desired = rendered[source.name]
        current = client.get_config(source.name)
        if current is None:
            client.put_config(source.name, desired)
            results.append(ApplyResult(source.name, "created", sorted(desired), topics))
            continue
        current = {k: v for k, v in current.items() if k != "name"}
        changed = sorted(k for k in set(desired) | set(current) if desired.get(k) != current.get(k))
        if changed:
            client.put_config(source.name, desired)
            results.append(ApplyResult(source.name, "updated", changed, topics))
        else:
            results.append(ApplyResult(source.name, "unchanged", [], topics))
    return results


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
