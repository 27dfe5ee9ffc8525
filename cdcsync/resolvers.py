"""The versions a Debezium event lacks, looked up: the two resolvers ``cdcsync.events.parse_record`` takes.

- **MariaDB snapshot rows** (``op=r``) carry the binlog position they were
  read at and no GTID. ``BinlogPositions`` maps the position to the domain-0
  GTID sequence before it (``BINLOG_GTID_POS``), so a row of a connector's
  snapshot and a row of ``bootstrap --from source`` read at the same position
  get the same version (``snapshot.reads``).
- **A new Postgres connector's first streamed transaction** carries no
  ``lastCommitLsn``; its snapshot rows rank at the snapshot's LSN P.
  ``SnapshotLsns`` finds P for those events: the snapshot rows before each of
  them in its partition.

Both are used by every streaming follower, by the bootstraps and by the
executors (they are picklable), so they live here in the core, below the
followers and the bootstrapper alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from cdcsync import kafka
from cdcsync.config import Config, SourceConfig
from cdcsync.errors import FatalError, RetryableError
from cdcsync.sources import kind_of


class BinlogPositions:
    """``events.BinlogSeq`` for a config's sources: a snapshot row's log position to the sequence before it.

    Each kind answers for its own (``Changes.position_seq``; MariaDB's GTIDs).

    One query per snapshot position (every row of a Debezium snapshot shares
    it), cached for the life of the process. Picklable: it holds only the
    source configs, and connects when asked.
    """

    def __init__(self, sources: Iterable[SourceConfig]) -> None:
        self.sources = {s.name: s for s in sources}
        self._seqs: dict[tuple[str, str, int], int | None] = {}

    @classmethod
    def of(cls, config: Config) -> BinlogPositions:
        return cls(config.sources)

    def __call__(self, source: str, binlog_file: str, binlog_pos: int) -> int | None:
        key = (source, binlog_file, binlog_pos)
        if key not in self._seqs:
            if source not in self.sources:
                raise FatalError(f"snapshot row of source {source!r}, which the config does not declare")
            found = self.sources[source]
            self._seqs[key] = kind_of(found).changes.position_seq(found, binlog_file, binlog_pos)
        return self._seqs[key]

    def __getstate__(self) -> dict[str, Any]:
        return {"sources": self.sources, "_seqs": {}}


class SnapshotLsns:
    """``events.SnapshotLsn``: where the snapshot before a record stands, read back in the record's partition.

    Asked only for the first transaction a new Postgres connector streams
    (its events carry no ``lastCommitLsn``). Its events follow the
    connector's snapshot rows, so reading back from one of them, over the
    other events of that transaction, meets a snapshot row: its LSN ranks it
    (P). A record that has a ``lastCommitLsn`` before that means no snapshot
    row of this connector is in the partition (the table was empty), so
    nothing here needs P: None. Answers are computed from the log alone, the
    same in every process, and cached for the life of the process. Picklable.
    """

    WINDOW = 256  # records read at first, back and forward; doubled while no answer is found
    MAX_WINDOW = 4096  # records held at once (wide rows: a window is at most a few hundred MB)
    FORWARD = 200_000  # records read forward at most: a first transaction longer than that asks again

    def __init__(self, kafka: dict[str, str]) -> None:
        self.kafka = kafka
        self._lsns: dict[tuple[str, int, int], int | None] = {}

    @classmethod
    def of(cls, config: Config) -> SnapshotLsns:
        return cls(config.kafka.client_config())

    def __call__(self, topic: str, partition: int, offset: int) -> int | None:
        if (topic, partition, offset) not in self._lsns:
            self._read_back(topic, partition, offset)
        return self._lsns[(topic, partition, offset)]

    def __getstate__(self) -> dict[str, Any]:
        return {"kafka": self.kafka, "_lsns": {}}

    def _read_back(self, topic: str, partition: int, offset: int) -> None:
        """Find the answer for ``offset``, and give it to every event of the same stretch, before and after.

        The stretch is the run of events without a ``lastCommitLsn`` around
        ``offset`` (the first transaction, possibly thousands of events): one
        lookup serves all of them, read once back and once forward.
        """
        consumer = kafka.consumer(
            {
                **self.kafka,
                "group.id": "cdcsync-snapshot-lsn",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            waiting, answer = [offset], None
            end, size = offset, self.WINDOW
            while end > low and answer is None:
                start = max(low, end - size)
                for at, value in reversed(_read_range(consumer, topic, partition, start, end)):
                    kind, lsn = _rank_of(value)
                    if kind == "first":
                        waiting.append(at)
                        continue
                    if kind is not None:
                        answer = (lsn,) if kind == "snapshot" else (None,)
                        break
                end, size = start, min(size * 2, self.MAX_WINDOW)
            start, size, stretch = offset + 1, self.WINDOW, True
            while stretch and start < min(high, offset + 1 + self.FORWARD):
                end = min(high, start + size)
                for at, value in _read_range(consumer, topic, partition, start, end):
                    kind, _lsn = _rank_of(value)
                    if kind == "first":
                        waiting.append(at)
                    elif kind is not None:
                        stretch = False  # the stretch ended: a later event is another question
                        break
                start, size = end, min(size * 2, self.MAX_WINDOW)
            for at in waiting:
                self._lsns[(topic, partition, at)] = answer[0] if answer else None
        except KafkaException as err:
            raise RetryableError(f"reading {topic}[{partition}] around offset {offset}: {err}") from None
        finally:
            consumer.close()


def _rank_of(value: bytes | None) -> tuple[str | None, int | None]:
    """("snapshot", its LSN) | ("first", None): no commit yet | ("streamed", None) | (None, None): not a change."""
    if value is None:
        return None, None
    try:
        envelope = orjson.loads(value)
        source = envelope["source"]
        last_commit, own = orjson.loads(source["sequence"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None, None
    if envelope.get("op") == "r":
        lsn = last_commit if last_commit is not None else own
        return ("snapshot", int(lsn)) if str(lsn).isdigit() else (None, None)
    return ("first", None) if last_commit is None else ("streamed", None)


def _read_range(consumer: Consumer, topic: str, partition: int, start: int, end: int) -> list[tuple[int, bytes | None]]:
    """The records at offsets [start, end) of one partition (compaction may have removed some)."""
    consumer.assign([TopicPartition(topic, partition, start)])
    records: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                break
            raise KafkaException(msg.error())
        if msg.offset() >= end:
            break
        records.append((msg.offset(), msg.value()))
        if msg.offset() == end - 1:
            break
    else:
        raise RetryableError(f"reading {topic}[{partition}] offsets {start}..{end - 1} took over 60 s")
    return records
