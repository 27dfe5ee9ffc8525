"""A driver-side batch read by its own offsets (``sync.batch_reader``), and chunks bounded in bytes, on plain data.

The real reading, against the broker, is in tests/integration/test_batch_reader.py;
the wide backlog it exists for, in tests/chaos/test_wide_after_start.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdcsync.errors import RetryableError
from cdcsync.sync.batch_reader import batch_span
from cdcsync.sync.dead_letters import DeadLetters
from cdcsync.sync.follower import Follower
from cdcsync.sync.mapping import TableMapping
from tests.unit.test_shape import TOPIC, Sink, record


def offsets(path: Path, batch: int, positions: dict[str, dict[str, int]]) -> None:
    (path / "offsets").mkdir(exist_ok=True)
    (path / "offsets" / str(batch)).write_text(f"v1\n{json.dumps({'batchWatermarkMs': 0})}\n{json.dumps(positions)}")


def test_a_batch_spans_from_the_previous_batchs_end_to_its_own(tmp_path: Path) -> None:
    offsets(tmp_path, 4, {"a": {"0": 120, "1": 7}})
    offsets(tmp_path, 5, {"a": {"0": 150, "1": 7}, "b": {"0": 3}})  # b: a table added to the running follower
    assert batch_span(tmp_path, 5) == ({"a": {0: 120, 1: 7}, "b": {0: -2}}, {"a": {0: 150, 1: 7}, "b": {0: 3}})


def test_the_first_batch_starts_at_the_initial_offsets(tmp_path: Path) -> None:
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"a":{"0":42}}')
    offsets(tmp_path, 0, {"a": {"0": 50}})
    assert batch_span(tmp_path, 0) == ({"a": {0: 42}}, {"a": {0: 50}})


def test_a_batch_the_checkpoint_does_not_hold_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RetryableError, match="no offsets for batch 3"):
        batch_span(tmp_path, 3)


def test_wide_records_are_written_in_chunks_bounded_by_their_bytes() -> None:
    sink, written = Sink(), []
    sink.write = lambda batch_id, rows: (written.append(len(rows)), Sink.write(sink, batch_id, rows))[1]  # type: ignore[method-assign]
    mapping = TableMapping("public.t", "t", ("id",), types={"id": "int", "v": "text"})
    dead = DeadLetters({"bootstrap.servers": "127.0.0.1:1"}, "dlq", "bytes-test")
    f = Follower("bytes-test", sink, {TOPIC: mapping}, dead, chunk_bytes=3 * 1500)  # type: ignore[arg-type]
    counts = f.process(1, [record(i, {"id": i, "v": "x" * 1000}) for i in range(10)])
    assert counts.applied == 10 and sum(written) == 10
    assert max(written) <= 4 and len(written) >= 3, written  # ~1.3 KB a record: three or four a chunk
