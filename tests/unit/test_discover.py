"""Table patterns: which of a database's tables a source's schemas, include and exclude capture."""

from __future__ import annotations

import pytest

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.connectors.discover import added, matching, resolve
from cdcsync.errors import ConfigError

BASE = {"name": "pg", "kind": "postgres", "port": 5432, "database": "app", "user": "u", "password": "p"}
CATALOG = [
    TableRef(namespace=ns, table=t)
    for ns, t in [
        ("public", "orders"),
        ("public", "customers"),
        ("public", "orders_archive"),
        ("public", "cdcsync_signal_pg"),
        ("sales", "Invoice Lines"),
        ("sales", "tmp_load"),
        ("audit", "events"),
    ]
]


def source(**fields: object) -> SourceConfig:
    return SourceConfig.model_validate({**BASE, **fields})


def names(tables: list[TableRef]) -> list[str]:
    return [f"{t.namespace}.{t.table}" for t in tables]


def test_schemas_include_and_exclude_pick_tables_named_ones_first() -> None:
    picked = matching(source(tables=["audit.events"], schemas=["sales"], exclude=[r"sales\.tmp_.*"]), CATALOG)
    assert names(picked) == ["audit.events", "sales.Invoice Lines"]
    picked = matching(source(include=[r"public\.orders.*"], exclude=[r".*_archive"]), CATALOG)
    assert names(picked) == ["public.orders"]
    # A pattern matches the whole name: `orders` alone is no prefix match, and the signal table never matches.
    assert names(matching(source(include=["orders", r"public\..*signal.*"]), CATALOG)) == []


def test_a_source_needs_some_tables_and_valid_regexes() -> None:
    with pytest.raises(ValueError, match="tables, schemas or include"):
        source()
    with pytest.raises(ValueError, match=r"'\[a-' is not a regular expression"):
        source(include=["[a-"])


def test_the_signal_table_stays_where_it_was_as_tables_are_found() -> None:
    assert str(source(schemas=["sales", "public"]).signal_table) == "sales.cdcsync_signal_pg"
    assert str(source(include=[r"audit\..*"]).signal_table) == "public.cdcsync_signal_pg"
    assert str(source(tables=["audit.events"], schemas=["sales"]).signal_table) == "audit.cdcsync_signal_pg"
    maria = SourceConfig.model_validate({**BASE, "kind": "mariadb", "include": [r"app\..*"]})
    assert maria.signal_namespace == "app"


def test_resolve_fills_tables_keeps_secrets_and_says_what_was_added() -> None:
    config = Config.model_validate({"sources": [{**BASE, "schemas": ["public"]}], "followers": []})
    first = resolve(config, lambda s: CATALOG[:2])
    assert names(first.sources[0].tables) == ["public.customers", "public.orders"]
    assert first.sources[0].password.get_secret_value() == "p"
    assert first.sources[0].signal_table == config.sources[0].signal_table
    later = resolve(config, lambda s: CATALOG[:3])
    assert {k: names(v) for k, v in added(first, later).items()} == {"pg": ["public.orders_archive"]}
    assert added(later, later) == {}


def test_a_follower_naming_a_table_no_pattern_matches_is_still_refused() -> None:
    config = Config.model_validate(
        {
            "sources": [{**BASE, "schemas": ["public"]}],
            "followers": [{"name": "s", "kind": "redis", "url": "redis://h", "tables": []}],
        }
    )
    resolved = resolve(config, lambda s: CATALOG[:1])
    follower = resolved.followers[0].model_copy(update={"tables": ["pg.public.nope"]})
    with pytest.raises(ConfigError, match="unknown pg.public.nope"):
        resolved.followed_tables(follower)
