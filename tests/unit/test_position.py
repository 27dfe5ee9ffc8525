"""A follower's position: read from a Spark checkpoint, judged against the broker's facts (plain data)."""

from __future__ import annotations

import json
from pathlib import Path

from cdcsync.sync.position import PartitionFacts, checkpoint_position, problems

HOUR_MS = 3_600_000
NOW = 1_800_000_000_000


def facts(position: int, start: int = 0, end: int = 100, horizon: int = HOUR_MS, age_ms: int | None = 0):
    stamp = None if age_ms is None else NOW - age_ms
    return PartitionFacts("src.public.t", 0, position, start, end, horizon, stamp)


def test_a_position_within_the_horizon_passes() -> None:
    assert problems([facts(10, age_ms=HOUR_MS // 2)], NOW) == []


def test_a_caught_up_follower_passes_however_old_its_last_change() -> None:
    assert problems([facts(100, age_ms=None)], NOW) == []


def test_a_position_past_the_horizon_is_refused() -> None:
    [line] = problems([facts(10, age_ms=2 * HOUR_MS)], NOW)
    assert "src.public.t[0] at offset 10" in line and "past the compaction horizon of 3600 s" in line


def test_the_margin_refuses_a_follower_that_could_not_outrun_the_cleaner() -> None:
    assert problems([facts(10, age_ms=HOUR_MS - 60_000)], NOW)  # a minute left of an hour: inside the 10% margin
    assert not problems([facts(10, age_ms=HOUR_MS - 7 * 60_000)], NOW)


def test_a_topic_without_a_horizon_names_connectors_apply() -> None:
    [line] = problems([facts(10, horizon=0, age_ms=1)], NOW)
    assert "min.compaction.lag.ms=0" in line and "cdcsync connectors apply" in line


def test_a_recreated_topic_and_a_truncated_log_are_lost_positions() -> None:
    [beyond] = problems([facts(500, end=20)], NOW)
    assert "beyond the log end 20" in beyond and "recreated" in beyond
    [below] = problems([facts(3, start=50)], NOW)
    assert "below the log start 50" in below


def test_checkpoint_position_is_the_last_committed_batch(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for batch, offset in ((0, 120), (1, 150), (2, 190)):
        meta = json.dumps({"batchWatermarkMs": 0})
        (tmp_path / "offsets" / str(batch)).write_text(f'v1\n{meta}\n{{"a.b.c":{{"0":{offset},"1":7}}}}')
    for batch in (0, 1):  # batch 2 began but never committed: Spark runs it again from batch 1's end
        (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert checkpoint_position(tmp_path) == {"a.b.c": {0: 150, 1: 7}}


def test_checkpoint_position_before_the_first_commit_is_the_initial_offsets(tmp_path: Path) -> None:
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"a.b.c":{"0":42}}')
    assert checkpoint_position(tmp_path) == {"a.b.c": {0: 42}}
    assert checkpoint_position(tmp_path / "none") is None
