"""What a Python worker reads from Spark's Arrow batches, and what it sends back: exact, whatever the values share."""

from __future__ import annotations

import pyarrow as pa

from cdcsync.events import Record
from cdcsync.sync.arrow_records import arrow_records
from cdcsync.sync.batch_counts import BatchCounts


def _batch(rows: list[tuple]) -> pa.RecordBatch:
    topic, partition, offset, key, value = (list(c) for c in zip(*rows, strict=True))
    return pa.RecordBatch.from_pydict(
        {
            "topic": pa.array(topic, pa.string()),
            "partition": pa.array(partition, pa.int32()),
            "offset": pa.array(offset, pa.int64()),
            "key": pa.array(key, pa.binary()),
            "value": pa.array(value, pa.binary()),
        }
    )


def test_records_of_one_topic_and_of_several_come_back_exact_and_in_order() -> None:
    one = [("cdc.a", 0, i, b'{"id":%d}' % i, b"{}" if i % 3 else None) for i in range(5)]
    mixed = [("cdc.b", 1, 7, b"k", b"v"), ("cdc.a", 0, 8, None, None), ("cdc.b", 2, 9, b"k2", b"v2")]
    records = list(arrow_records([_batch(one), _batch(mixed)]))
    assert records == [Record(*r) for r in one + mixed]
    assert all(type(r.topic) is str and type(r.partition) is int for r in records)


def test_batch_counts_survive_the_trip_back_to_the_driver() -> None:
    counts = BatchCounts(records=5, applied=3, older=1, tombstones=1, applied_by_op={"u": 2, "d": 1},
                         newest_commit_ms={"public.t": 1_700_000_000_123}, lags_s=[0.25, 1.5, 0.0], waited_s=0.5,
                         retries=2)  # fmt: skip
    assert BatchCounts.from_json(counts.to_json()) == counts
