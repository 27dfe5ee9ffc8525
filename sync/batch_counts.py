"""What one batch did (``BatchCounts``): its records, what was applied, older, tombstones, dead-lettered.

A follower (``sync.follower``) fills one per batch; a batch applied on several
executors (``sync.executors``) is the ``merge`` of theirs, sent back as JSON.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from cdcsync.sync.mapping import Row
from cdcsync.sync.sink import WriteResult


@dataclass
class BatchCounts:
    """What one batch did. It adds up: ``records = applied + older + tombstones + dead_lettered + held``.

    The rest feeds the metrics. A batch applied on several executors is the
    ``merge`` of their counts, carried back to the driver as JSON.
    """

    records: int = 0
    applied: int = 0
    older: int = 0
    tombstones: int = 0
    dead_lettered: int = 0
    applied_by_op: dict[str, int] = field(default_factory=dict)  # "unknown" when the sink skipped some rows
    newest_commit_ms: dict[str, int] = field(default_factory=dict)  # table -> newest source commit applied
    lags_s: list[float] = field(default_factory=list)  # source commit -> written, per applied change
    waited_s: float = 0.0  # time parsing stood still, waiting for the sink
    retries: int = 0  # writes retried after a retryable sink error (made on an executor, counted on the driver)
    lacking: dict[str, list[str]] = field(default_factory=dict)  # topic -> columns changes lacked (an executor's)
    held: int = 0  # records of tables the sink failed for alone, set aside for a later retry (sync.held)
    held_tables: dict[str, list[str]] = field(default_factory=dict)  # topic -> [reason, fix]

    def adds_up(self) -> bool:
        return self.records == self.applied + self.older + self.tombstones + self.dead_lettered + self.held

    def count_written(self, rows: Sequence[Row], result: WriteResult) -> None:
        self.applied += result.applied
        self.older += result.older
        if result.applied != len(rows):  # which rows applied is unknown: count them, no per-op detail
            if result.applied:
                self.applied_by_op["unknown"] = self.applied_by_op.get("unknown", 0) + result.applied
            return
        now_ms = time.time() * 1000
        for row in rows:
            change = row.change
            self.applied_by_op[change.op] = self.applied_by_op.get(change.op, 0) + 1
            if change.commit_ts_ms:
                self.lags_s.append(max(now_ms - change.commit_ts_ms, 0) / 1000)
                if change.commit_ts_ms > self.newest_commit_ms.get(change.table, 0):
                    self.newest_commit_ms[change.table] = change.commit_ts_ms

    def merge(self, other: BatchCounts) -> BatchCounts:
        merged = BatchCounts(
            records=self.records + other.records,
            applied=self.applied + other.applied,
            older=self.older + other.older,
            tombstones=self.tombstones + other.tombstones,
            dead_lettered=self.dead_lettered + other.dead_lettered,
            applied_by_op=dict(self.applied_by_op),
            newest_commit_ms=dict(self.newest_commit_ms),
            lags_s=self.lags_s + other.lags_s,
            waited_s=self.waited_s + other.waited_s,
            retries=self.retries + other.retries,
            held=self.held + other.held,
            held_tables={**self.held_tables, **other.held_tables},
        )
        for op, n in other.applied_by_op.items():
            merged.applied_by_op[op] = merged.applied_by_op.get(op, 0) + n
        for table, ts in other.newest_commit_ms.items():
            merged.newest_commit_ms[table] = max(ts, merged.newest_commit_ms.get(table, 0))
        for topic, columns in (*self.lacking.items(), *other.lacking.items()):
            merged.lacking[topic] = sorted(set(merged.lacking.get(topic, ())) | set(columns))
        return merged

    def to_json(self) -> bytes:
        return orjson.dumps(self)  # orjson writes a dataclass itself; asdict copied lags_s, one float per change

    @classmethod
    def from_json(cls, raw: bytes | str) -> BatchCounts:
        return cls(**orjson.loads(raw))
