"""How a follower learns a table's shape while it runs (docs/schema-changes.md).

A follower maps each table by the shape it read from the catalog. A change
that carries a column the mapping does not know (ADD COLUMN), or lacks one it
does (DROP COLUMN), makes the follower read the catalog again; ``learned``
works out the mapping from then on and the columns the table lost, which the
follower then has its sink forget in every row. All that was learned lives in
the ``TableMapping`` (``untyped``, ``dropped``, ``may_lack``), so the
mappings the driver ships with a batch carry it to the executors.

On an executor there is no catalog to read (no source credentials): its
``learn`` is ``shape_changed``, the batch stops with ``ShapeChanged`` naming
what the change brought and lacked, and the driver learns and runs the batch
again (``sync.executors``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace

from cdcsync.errors import RetryableError
from cdcsync.sync.mapping import TableMapping

SHAPE_CHANGED = re.compile(r"table shape changed: (\{[^{}]*\})")
NONE: frozenset[str] = frozenset()


class ShapeChanged(RetryableError):
    """A change brought or lacked columns, and this process cannot read the catalog (an executor)."""

    def __init__(self, topic: str, unknown: Iterable[str] = (), lacking: Iterable[str] = ()) -> None:
        shape = json.dumps({"topic": topic, "unknown": sorted(unknown), "lacking": sorted(lacking)})
        super().__init__(f"table shape changed: {shape} (the driver reads its catalog and runs the batch again)")


def shape_changed(topic: str) -> TableMapping:
    """The ``learn`` of a follower on an executor: the driver learns the table, this batch stops."""
    raise ShapeChanged(topic)


def shapes_changed(error: str) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """What the executors' ``ShapeChanged`` in a failed batch's error say: topic -> (unknown, lacking) columns."""
    found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for text in SHAPE_CHANGED.findall(error):
        shape = json.loads(text)
        unknown, lacking = found.get(shape["topic"], (NONE, NONE))
        found[shape["topic"]] = (unknown | set(shape["unknown"]), lacking | set(shape["lacking"]))
    return found


def differences(mapping: TableMapping, columns: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The columns a change brings that ``mapping`` does not know, and those it knows the change lacks."""
    present = frozenset(columns)
    unknown = present - mapping.plan.keys() - mapping.dropped - mapping.unlogged
    lacking = frozenset(mapping.plan.keys()) - present - mapping.may_lack
    return unknown, lacking


def learned(
    old: TableMapping, fresh: TableMapping, unknown: frozenset[str], lacking: frozenset[str]
) -> tuple[TableMapping, frozenset[str]]:
    """The table's mapping from now on (``fresh``: read from the catalog now), and the columns it lost.

    A column lost is one the old mapping had (typed, or kept untyped) that the
    catalog no longer lists. A column a change brings that the catalog does
    not list either (added and dropped again since) is kept untyped, until a
    change lacks it. A column the catalog lists that a change lacks is allowed
    to be absent from then on (a change written before its ADD COLUMN).
    """
    listed = frozenset(fresh.types)
    lost = (frozenset(old.types) | old.untyped) - listed
    mapping = replace(
        fresh,
        untyped=(old.untyped | unknown) - listed - lost,
        dropped=(old.dropped | lost) - listed,
        may_lack=(old.may_lack | lacking) & listed,
    )
    return mapping, lost


def reindex_reason(old: TableMapping, new: TableMapping, lost: frozenset[str]) -> str | None:
    """Why rows the log will never change again differ from the source after this shape change, if they do.

    A column lost and one gained in the same change: most likely a RENAME
    COLUMN, and rows not changed since hold the value under the old name. A
    column gained that the source fills in existing rows (a DEFAULT): no
    change event carries those values (``backfilled``: the log can bring them).
    """
    gained = frozenset(new.types) - frozenset(old.types) - old.untyped
    if lost and gained:
        return (
            f"columns {sorted(lost)} went and {sorted(gained)} came in one change (a RENAME COLUMN?): rows not "
            f"changed since lack {sorted(gained)}"
        )
    if gained & new.filled:
        return (
            f"columns {sorted(gained & new.filled)} were added with a value for the rows already there (a DEFAULT), "
            "which no change event carries"
        )
    return None


def backfilled(old: TableMapping, new: TableMapping, lost: frozenset[str]) -> frozenset[str]:
    """Columns gained that the source filled in the rows already there (a DEFAULT), which a backfill of the table
    through the log brings to every store (``sync.backfill``); none when columns were lost too (a RENAME)."""
    if lost:
        return NONE
    return (frozenset(new.types) - frozenset(old.types) - old.untyped) & new.filled


def kind_changes(mapping: TableMapping, fresh: TableMapping) -> dict[str, tuple[str, str]]:
    """Columns whose type the catalog now gives another kind: ``{column: (was, is)}`` (a widening keeps its kind)."""
    return {
        c: (was, fresh.types[c])
        for c, was in mapping.types.items()
        if c in fresh.types and fresh.types[c] != was and (mapping.include is None or c in mapping.include)
    }


def untyped(mapping: TableMapping, unknown: frozenset[str], lacking: frozenset[str]) -> TableMapping:
    """For a follower with no catalog to ask (tests, tools): new columns kept as they are, absent ones allowed."""
    return replace(mapping, untyped=mapping.untyped | unknown, may_lack=mapping.may_lack | lacking)
