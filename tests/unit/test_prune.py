"""``connectors apply --prune``: which connectors are this deployment's orphans, and what pruning one needs.

No network: Kafka Connect is a stand-in holding connector configs, and the database check is replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcsync.config import Config
from cdcsync.connectors import owned, remove
from cdcsync.connectors.owned import Orphan, deployment_id, orphans, rebuild
from cdcsync.connectors.render import MARKER, properties_text, read_properties, render, secret_properties
from cdcsync.connectors.topics import topic_specs
from cdcsync.errors import ConfigError


def config(tmp_path: Path, *sources: dict[str, Any], followers: list[dict[str, Any]] | None = None) -> Config:
    return Config.model_validate(
        {
            "sources": list(sources),
            "followers": followers or [],
            "state_dir": str(tmp_path / "state"),
            "connect": {"secrets_dir": str(tmp_path / "secrets"), "secrets_dir_in_connect": "/run/connect-secrets"},
        }
    )


def source(name: str, kind: str = "postgres", **extra: Any) -> dict[str, Any]:
    tables = ["public.t"] if kind == "postgres" else ["app.t"]
    base = {"name": name, "kind": kind, "port": 5432, "database": "app", "user": "u", "password": "pw"}
    return {**base, "tables": tables, **extra}


class Connect:
    """Kafka Connect's REST API as far as pruning uses it: configs, status, delete."""

    url = "http://connect:8083"

    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self.held = configs
        self.deleted: list[str] = []

    def configs(self) -> dict[str, dict[str, str]]:
        return dict(self.held)

    def status(self, name: str) -> dict[str, Any] | None:
        return {"connector": {"state": "RUNNING"}, "tasks": []} if name in self.held else None

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        self.held.pop(name, None)


def registered(cfg: Config, marker: str | None) -> dict[str, dict[str, str]]:
    """Each source of ``cfg`` as apply registers it, its secrets file written; ``marker`` as its deployment."""
    out = {}
    for s in cfg.sources:
        path = Path(cfg.connect.secrets_dir or "") / f"{s.name}.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(properties_text(secret_properties(s, cfg)))
        out[s.name] = render(s, cfg, deployment=marker)
    return out


def test_properties_written_are_read_back_exactly() -> None:
    values = {"database.password": "p=a:s s\\w#!\n\tü😀 ", "a b": " x", "empty": ""}
    assert read_properties(properties_text(values)) == values


def test_the_deployment_name_is_made_once_and_kept(tmp_path: Path) -> None:
    cfg = config(tmp_path, source("a"))
    assert deployment_id(cfg, create=False) is None
    made = deployment_id(cfg)
    assert made and deployment_id(cfg) == made == deployment_id(cfg, create=False)
    assert render(cfg.sources[0], cfg, deployment=made)[MARKER] == made
    # A source's own debezium: map cannot claim another deployment's connectors.
    claimed = config(tmp_path, source("a", debezium={MARKER: "someone-else"}))
    assert render(claimed.sources[0], claimed, deployment=made)[MARKER] == made


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_source_is_read_back_from_its_connector_config(tmp_path: Path, kind: str) -> None:
    tables = (
        ["public.t", {"namespace": "public", "table": "a.b, c"}, {"namespace": "odd.ns", "table": "x"}]
        if kind == "postgres"
        else ["app.t", {"namespace": "app", "table": "we ird"}]
    )
    extra = {"slot": "my_slot", "publication": "my_pub"} if kind == "postgres" else {}
    cfg = config(tmp_path, source("gone", kind, tables=tables, password="s3=cr:et", **extra))
    original = cfg.sources[0]
    back = rebuild("gone", registered(cfg, "d")["gone"], cfg)
    assert (back.kind, back.host, back.port, back.user) == (original.kind, original.host, original.port, original.user)
    assert back.password.get_secret_value() == "s3=cr:et"
    assert (back.slot, back.publication, back.signal_table) == (
        original.slot,
        original.publication,
        original.signal_table,
    )
    assert [t.name for t in topic_specs(back)] == [t.name for t in topic_specs(original)]
    if kind == "postgres":
        assert back.database == original.database


def test_without_its_secrets_file_the_password_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(tmp_path, source("gone"))
    values = registered(cfg, "d")["gone"]
    (tmp_path / "secrets" / "gone.properties").unlink()
    with pytest.raises(ValueError, match="CDCSYNC_SOURCE_GONE_PASSWORD"):
        rebuild("gone", values, cfg)
    monkeypatch.setenv("CDCSYNC_SOURCE_GONE_PASSWORD", "from-env")
    assert rebuild("gone", values, cfg).password.get_secret_value() == "from-env"


def test_only_this_deployments_connectors_of_sources_gone_from_the_config_are_orphans(tmp_path: Path) -> None:
    before = config(tmp_path, source("kept"), source("gone"), source("other"))
    mine = deployment_id(before)
    assert mine
    held = registered(before, mine)
    held["other"][MARKER] = "another-deployment"
    held["by_hand"] = {k: v for k, v in held["gone"].items() if k != MARKER}
    held["foreign"] = {"connector.class": "org.example.Sink", MARKER: mine}
    after = config(tmp_path, source("kept"))
    found = {o.name: o for o in orphans(after, Connect(held))}  # type: ignore[arg-type]
    assert sorted(found) == ["foreign", "gone"]
    assert found["gone"].source is not None and found["gone"].problem is None
    assert found["foreign"].source is None and "connector.class" in (found["foreign"].problem or "")
    assert found["gone"].holds()[0].startswith("replication slot cdcsync_gone (it keeps every WAL segment")


def test_an_orphan_whose_database_cannot_be_reached_is_kept_with_what_stays_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = config(tmp_path, source("gone"))
    connect = Connect(registered(before, deployment_id(before)))
    after = config(tmp_path)
    found = orphans(after, connect)  # type: ignore[arg-type]
    monkeypatch.setattr(remove, "_unreachable", lambda s: "connection refused")
    [result] = remove.prune(after, found, client=connect)  # type: ignore[arg-type]
    assert result.action == "kept" and connect.deleted == []
    assert result.held[:2] == ["connector gone", owned.held(found[0].source)[0]]  # type: ignore[arg-type]
    error = result.error or ""
    assert "cannot be reached (connection refused)" in error and "replication slot cdcsync_gone" in error
    assert "WAL" in error and "DELETE http://connect:8083/connectors/gone" in error


def test_a_dry_run_changes_nothing_and_says_what_would_go(tmp_path: Path) -> None:
    before = config(tmp_path, source("gone", kind="mariadb"))
    connect = Connect(registered(before, deployment_id(before)))
    after = config(tmp_path)
    [result] = remove.prune(after, orphans(after, connect), dry_run=True, client=connect)  # type: ignore[arg-type]
    assert (result.action, result.held, connect.deleted) == (
        "would prune",
        ["connector gone", "signal table app.cdcsync_signal_gone"],
        [],
    )


def test_pruning_a_source_a_follower_still_names_is_refused(tmp_path: Path) -> None:
    follower = {"name": "cache", "kind": "redis", "url": "redis://127.0.0.1:6379/0", "tables": ["gone.public.t"]}
    after = config(tmp_path, source("kept"), followers=[follower])
    orphan = Orphan("gone", {}, None)
    with pytest.raises(ConfigError, match="followers cache still read source gone"):
        remove.refuse_read(after, [orphan])
    remove.refuse_read(after, [Orphan("other", {}, None)])
