"""What ``verify`` found in one table of a follower (``TableReport``): its missing, extra and stale rows.

Part of verify (``sync.verify``), which re-exports it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

EXAMPLES = 5  # ids of each kind in a report's JSON
KINDS = ("missing", "extra", "stale")
KIND_BYTE = {kind: kind[:1].encode() for kind in KINDS}  # a differing id's kind, in the spill of them
LISTED = 10_000  # ids of each kind a report keeps; the counts go on


@dataclass
class TableReport:
    follower: str
    table: str
    target: str
    source_rows: int = 0
    store_rows: int = 0
    missing: list[str] = field(default_factory=list)  # the first LISTED ids, in id order
    extra: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    missing_count: int = 0
    extra_count: int = 0
    stale_count: int = 0
    # the first EXAMPLES stale ids -> each field that differs -> [the source's value, the store's], as text where
    # the value has no JSON form (``sync.verify.describe``)
    differing: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (self.missing_count or self.extra_count or self.stale_count)

    def as_dict(self, ids: int | None = EXAMPLES) -> dict[str, Any]:
        """As JSON: the first ``ids`` listed ids of each kind (None: all listed, what ``repair --from`` reads)."""
        data = asdict(self)
        for key in KINDS:
            data[key] = data[key][:ids]
        data["clean"] = self.clean
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableReport:
        """A report as ``as_dict(None)`` wrote it."""
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**fields)

    def listed(self) -> dict[str, str]:
        """Each listed id -> its kind."""
        return {ident: kind for kind in KINDS for ident in getattr(self, kind)}
