"""Compare a derived store with its source, row by row: the proof of convergence.

For each followed table, the source rows are read from the database, mapped
the way the follower maps changes, and put in the sink's stored form; the
sink's live rows are read back. Each id is then ``missing`` (in the source,
not the store), ``extra`` (in the store only) or ``stale`` (both, but the
mapped values differ), compared by a fingerprint of the values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from cdcsync.config import Config, FollowerConfig
from cdcsync.sync.catalog import mappings_for, source_rows
from cdcsync.sync.mapping import canonical_doc, doc_id, fingerprint
from cdcsync.sync.sink import Sink

EXAMPLES = 5


@dataclass
class TableReport:
    follower: str
    table: str
    target: str
    source_rows: int = 0
    store_rows: int = 0
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.stale)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("missing", "extra", "stale"):
            data[f"{key}_count"] = len(data[key])
            data[key] = data[key][:EXAMPLES]
        data["clean"] = self.clean
        return data


def verify_follower(config: Config, follower: FollowerConfig, sink: Sink) -> list[TableReport]:
    mappings = mappings_for(config, follower)
    sink.open(list(mappings.values()))
    reports = []
    for source, table in config.followed_tables(follower):
        mapping = mappings[source.topic(table)]
        report = TableReport(follower.name, f"{source.name}.{table}", mapping.target)
        expected: dict[str, str] = {}
        for row in source_rows(source, table):
            expected[doc_id(row, mapping)] = fingerprint(_present(sink.stored_form(canonical_doc(row, mapping))))
        held = {ident: fingerprint(_present(doc)) for ident, (_version, doc) in sink.held(mapping.target).items()}
        report.source_rows, report.store_rows = len(expected), len(held)
        report.missing = sorted(set(expected) - set(held))
        report.extra = sorted(set(held) - set(expected))
        report.stale = sorted(i for i in set(expected) & set(held) if expected[i] != held[i])
        reports.append(report)
    return reports


def _present(doc: dict[str, Any]) -> dict[str, Any]:
    """A null field and an absent one are the same value: a row written before ADD COLUMN lacks the field.

    Redis and Delta store no nulls anyway; Elasticsearch keeps an explicit
    null in ``_source``, which every query treats as absent.
    """
    return {name: value for name, value in doc.items() if value is not None}
