"""Read each followed table's columns from its source database, to build its mapping.

Debezium's schemaless JSON does not say that ``"2024-02-29Z"`` is a date; the
source catalog does. A follower reads it once at start; a mapping's ``types``
override what it finds. The same reader serves ``verify``, which also reads
the rows themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cdcsync.config import Config, FollowerConfig, SourceConfig, TableRef
from cdcsync.errors import FatalError
from cdcsync.names import default_target
from cdcsync.sources import kind_of
from cdcsync.sources.reads import PAGE_ROWS, Columns
from cdcsync.sync.mapping import TableMapping

__all__ = ["PAGE_ROWS", "Columns", "columns", "learner", "mappings_for", "source_pages", "source_rows", "table_bytes"]


def columns(source: SourceConfig, table: TableRef) -> Columns:
    """A table's columns, their mapping types and its primary key, from the source's catalog (``Reads.columns``)."""
    found = kind_of(source).reads.columns(source, table)
    if not found.types and not found.unlogged:
        raise FatalError(f"source {source.name}: table {table} not found while reading its columns")
    return found


def mappings_for(config: Config, follower: FollowerConfig) -> dict[str, TableMapping]:
    """The follower's mapping per Debezium topic."""
    result: dict[str, TableMapping] = {}
    targets: dict[str, str] = {}
    for source, table in config.followed_tables(follower):
        mapping = table_mapping(source, table, follower)
        if mapping.target in targets:
            raise FatalError(
                f"follower {follower.name}: {targets[mapping.target]} and {source.name}.{table} both map to "
                f"{mapping.target!r}; set mappings.'{source.name}.{table}'.target (or mappings.'<namespace>.<table>'"
                ".target) for one of them"
            )
        targets[mapping.target] = f"{source.name}.{table}"
        result[source.topic(table)] = mapping
    return result


def table_mapping(source: SourceConfig, table: TableRef, follower: FollowerConfig) -> TableMapping:
    """One table's mapping: its columns and key from the catalog as they are now, with the follower's overrides."""
    override = follower.mapping_for(source.name, table)
    types, key_columns, filled, millis, decimals, widths, unlogged = columns(source, table)
    if override:
        types.update(override.types)
    return TableMapping(
        table=str(table),
        target=override.target if override and override.target else default_target(table.table),
        key_columns=key_columns,
        include=tuple(override.include) if override and override.include is not None else None,
        rename=dict(override.rename) if override else {},
        types=types,
        filled=filled,
        unlogged=unlogged - frozenset(types),
        millis=millis,
        decimals={c: d for c, d in decimals.items() if types.get(c) == "decimal"},
        widths={c: n for c, n in widths.items() if types.get(c) == "bits"},
    )


def learner(config: Config, follower: FollowerConfig) -> Callable[[str], TableMapping]:
    """``topic -> its table's mapping read anew``: how a follower learns a shape that changed while it runs."""
    tables = {source.topic(table): (source, table) for source, table in config.followed_tables(follower)}

    def learn(topic: str) -> TableMapping:
        source, table = tables[topic]
        return table_mapping(source, table, follower)

    return learn


def source_rows(source: SourceConfig, table: TableRef, where: str | None = None) -> Iterator[dict[str, Any]]:
    """Every row of a source table (those matching SQL ``where``, if given), as the database driver returns it."""
    kind = kind_of(source)
    condition = f" WHERE {where}" if where else ""
    yield from kind.reads.stream(
        source, f"SELECT {kind.reads.every_column(source, table)} FROM {kind.qualified(table)}{condition}"
    )


def source_pages(
    source: SourceConfig, table: TableRef, key: Sequence[str], page_rows: int = PAGE_ROWS
) -> Iterator[dict[str, Any]]:
    """Every row of a source table in key order, ``page_rows`` rows a query, each query its own transaction.

    For a pass that runs for hours at a slow pace (the daemon's background
    verify): one cursor open that long would hold Postgres's oldest snapshot
    back (vacuum could not clean behind it) or keep a MariaDB transaction
    open. Each page starts after the last key of the one before; a row
    changed between two pages is seen as it is when its page is read.
    """
    kind = kind_of(source)
    names = [kind.quote(column) for column in key]
    left = f"({', '.join(names)})"
    after: tuple[Any, ...] | None = None
    selected = f"SELECT {kind.reads.every_column(source, table)} FROM {kind.qualified(table)}"
    while True:
        where = "" if after is None else f" WHERE {left} > ({', '.join(['%s'] * len(key))})"
        query = f"{selected}{where} ORDER BY {', '.join(names)} LIMIT {int(page_rows)}"
        rows = kind.reads.page(source, query, after)
        yield from rows
        if len(rows) < page_rows:
            return
        after = tuple(rows[-1][column] for column in key)


def table_bytes(source: SourceConfig, table: TableRef) -> int:
    """The bytes a source table takes on disk, its partitions' with it (0 when the catalog cannot tell)."""
    return kind_of(source).reads.table_bytes(source, table)
