"""The tables a source's patterns name: ``schemas``, ``include`` and ``exclude`` against the database's catalog.

A source may name its tables one by one (``tables``), by whole schema
(``schemas``: every table of a Postgres schema or a MariaDB database) and by
regular expressions over ``namespace.table`` (``include``, less ``exclude``),
as Debezium's ``table.include.list`` does. ``resolve`` asks each such source's
database which tables match and gives the config with them in ``tables``:
the named ones first, in their order, then the matched ones sorted. Every
command that reads the tables (``cdcsync.cli.load``) sees that config, and
the daemon asks again each ``CHECK_S`` (``TableWatch``): a table created later
that matches is captured through ``connectors apply`` (an incremental
snapshot of its rows; docs/schema-changes.md, "A table added") and its
followers start following it, with no restart.

Only tables capture can key and publish match: tables with a primary key
(topics are keyed and compacted by it) and, on Postgres, whole tables (a
partitioned table, not its partitions) that the source's user owns (a
publication holds only those). cdcsync's own signal tables never match.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.errors import CdcsyncError
from cdcsync.sources import UNREACHABLE, kind_of

log = logging.getLogger(__name__)

CHECK_S = 30.0  # how often the daemon looks for tables created since
SIGNAL_TABLE = re.compile(r"cdcsync_signal_.*")


def matching(source: SourceConfig, catalog: Sequence[TableRef]) -> list[TableRef]:
    """``source.tables``, then the tables of ``catalog`` its patterns match, sorted: what it captures."""
    named = list(source.tables)
    found = []
    for table in catalog:
        name = f"{table.namespace}.{table.table}"
        wanted = table.namespace in source.schemas or any(re.fullmatch(p, name) for p in source.include)
        if not wanted or any(re.fullmatch(p, name) for p in source.exclude) or SIGNAL_TABLE.fullmatch(table.table):
            continue
        if table not in named:
            found.append(table)
    return named + sorted(found, key=lambda t: (t.namespace, t.table))


def catalog(source: SourceConfig) -> list[TableRef]:
    """The tables of the source's database that capture could take."""
    try:
        rows = kind_of(source).capture.capturable(source)
    except UNREACHABLE as err:
        where = f"source {source.name} ({source.kind} {source.host}:{source.port}/{source.database})"
        detail = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise CdcsyncError(f"{where}: cannot list its tables for schemas/include: {detail}") from None
    return [TableRef(namespace=str(ns), table=str(name)) for ns, name in rows]


def resolve(config: Config, lister: Callable[[SourceConfig], list[TableRef]] = catalog) -> Config:
    """``config`` with every source's pattern-matched tables in its ``tables``; the same config without patterns."""
    if not any(s.patterns for s in config.sources):
        return config
    data = config.redacted()
    for index, source in enumerate(config.sources):
        if source.patterns:
            data["sources"][index]["tables"] = [t.model_dump() for t in matching(source, lister(source))]
    data["origin"] = config.origin
    return Config.with_secrets(data, config.secrets())


def added(before: Config, after: Config) -> dict[str, list[TableRef]]:
    """Tables ``after`` captures that ``before`` did not, by source name."""
    old = {s.name: set(s.tables) for s in before.sources}
    new = {s.name: [t for t in s.tables if t not in old.get(s.name, set())] for s in after.sources}
    return {name: tables for name, tables in new.items() if tables}


class TableWatch:
    """The daemon's round: tables created since that a source's patterns match are captured, then followed.

    ``base``: the config as the file gives it (patterns unresolved); ``current``: as resolved at the daemon's
    start. A tick lists the tables again; new ones go through ``connectors apply`` for their sources (capture,
    an incremental snapshot of their rows), then ``adopt`` gets the config that captures them, for the
    followers to follow them. A failed apply (a new table capture refuses: its preflight problem is logged)
    is tried again next tick.
    """

    def __init__(self, base: Config, current: Config, adopt: Callable[[Config], None]) -> None:
        self.base, self.current, self.adopt = base, current, adopt
        self.refused: dict[str, str] = {}  # source -> the apply error last logged, to log a new one only

    def tick(self) -> None:
        from cdcsync.connectors.apply import apply

        after = resolve(self.base)
        new = added(self.current, after)
        if not new:
            return
        names = ", ".join(f"{s}: {', '.join(str(t) for t in tables)}" for s, tables in sorted(new.items()))
        try:
            results = apply(after, sorted(new))
        except CdcsyncError as err:
            if self.refused.get(names) != str(err):
                log.error("tables matched since the start (%s) are not captured: %s", names, err)
            self.refused[names] = str(err)
            return
        self.refused.clear()
        for result in results:
            log.info("connector %s: %s; snapshot of %s", result.connector, result.action, result.snapshot)
        self.current = after
        self.adopt(after)
        log.info("now capturing and following tables created since the start: %s", names)
