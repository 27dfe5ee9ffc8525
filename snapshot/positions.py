"""Where a consistent read of a source stands in its change log (``bootstrap --from source``).

A read of the source reflects some changes and not others. To continue from it
with no gap and no double apply, the bootstrapper needs three things from each
source, and this module gives them for Postgres and MariaDB:

- the **read** itself: the JDBC session statement that puts every parallel
  Spark JDBC reader into the same snapshot (Postgres), or into a snapshot
  whose binlog position each chunk reports (MariaDB);
- the **version** of a snapshot row, comparable with change versions
  (``cdcsync.events``): at least the version of every change the read
  reflects, and below every change it does not;
- when the connector has **passed** the read: every change the read reflects
  is in Kafka, so the end offsets captured after that split the log exactly.

Postgres: one ``REPEATABLE READ`` transaction exports its snapshot
(``pg_export_snapshot``) and every reader imports it, so all chunks see one
instant. Whether a change is reflected is decided by its transaction id
against the snapshot's ``xmin:xmax:xip`` (``pg_current_snapshot``): exactly
MVCC's own rule, so a transaction that began before the snapshot and
committed after it is correctly *not* reflected, however small its LSNs.
Row versions are the highest version among reflected changes, read from the
log (``lastCommitLsn`` only grows in commit order, so every unreflected
change is above it).

MariaDB has no snapshot export: each chunk opens its own ``START TRANSACTION
WITH CONSISTENT SNAPSHOT`` and reads the binlog position of that snapshot
(``binlog_snapshot_file``/``_position``) in the same query. The position
maps to a GTID (``BINLOG_GTID_POS``), and a row's version is
``seq << 16 | 0xFFFF``: above every change of transactions up to ``seq``,
below every later one. Chunks may stand at different positions; each row
carries its own, which is all the apply rule needs.

Debezium's own MariaDB snapshot rows (``op=r``) carry the binlog position they
were read at and no GTID. ``BinlogPositions`` maps that position the same
way, so a row of a connector's snapshot and a row of ``bootstrap --from
source`` read at the same position get the same version
(``cdcsync.events``: ``parse_record(..., binlog_seq=...)``).

A new Postgres connector's snapshot rows rank at the snapshot's LSN P, and
the first transaction it streams after them carries no ``lastCommitLsn``.
``SnapshotLsns`` finds P for that transaction's events: the snapshot rows
before each of them in its partition (``parse_record(..., snapshot_lsn=...)``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pymysql  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from cdcsync.config import Config, SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.db import connect_mariadb, connect_postgres
from cdcsync.errors import FatalError, RetryableError
from cdcsync.events import MINOR_BITS, MINOR_MAX

XID_MOD = 1 << 32  # Debezium reports 32-bit xids; the snapshot's are 64-bit (epoch << 32 | xid)
MARIA_FILE, MARIA_POS = "_cdcsync_binlog_file", "_cdcsync_binlog_pos"


@dataclass
class PostgresRead:
    """An exported Postgres snapshot, held open until ``close``."""

    source: SourceConfig
    snapshot_id: str = ""
    xmin: int = 0
    xmax: int = 0
    xip: frozenset[int] = frozenset()
    wal_lsn: int = 0  # WAL insert position just after the snapshot: every reflected commit is below it
    _conn: Any = field(default=None, repr=False)

    def open(self) -> PostgresRead:
        self._conn = connect_postgres(self.source)
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = self._conn.execute(
            "SELECT pg_export_snapshot(), pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
        ).fetchone()
        assert row is not None
        snapshot_id, visibility, lsn = row
        xmin, xmax, xip = visibility.split(":")
        self.snapshot_id, self.xmin, self.xmax = snapshot_id, int(xmin), int(xmax)
        self.xip = frozenset(int(x) % XID_MOD for x in xip.split(",") if x)
        hi, lo = lsn.split("/")
        self.wal_lsn = int(hi, 16) << 32 | int(lo, 16)
        return self

    def session_init(self) -> str:
        """Run by each JDBC reader before its query: join the exported snapshot."""
        return (  # an interval as ISO 8601 text, the form sync.values reads (Debezium's, parts left out); money
            # in the C locale's form, which sync.values reads as its digits
            f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '{self.snapshot_id}'; "
            "SET IntervalStyle = 'iso_8601'; SET lc_monetary = 'C'"
        )

    def count(self, qualified: str) -> int:
        return int(self._conn.execute(f"SELECT count(*) FROM {qualified}").fetchone()[0])

    def key_bounds(self, qualified: str, column: str) -> tuple[Any, Any]:
        return tuple(self._conn.execute(f'SELECT min("{column}"), max("{column}") FROM {qualified}').fetchone())

    def reflects(self, txid: int) -> bool:
        """MVCC visibility of a transaction in this snapshot (modulo-2^32 comparison, as Postgres does)."""
        xid = txid % XID_MOD
        if xid in self.xip:
            return False
        behind = (self.xmax - xid) % XID_MOD  # how far below xmax, if it is below at all
        return 0 < behind <= 1 << 31

    def mark(self) -> None:
        """Commit a WAL message after the snapshot, so the connector has a commit to pass even when idle."""
        with connect_postgres(self.source) as conn:
            conn.execute("SELECT pg_logical_emit_message(true, 'cdcsync.bootstrap', %s)", (self.snapshot_id,))

    def passed(self, offset: dict[str, Any]) -> bool:
        """Has the connector committed an offset past the snapshot? (then its records are all in Kafka)"""
        return int(offset.get("lsn_commit") or 0) >= self.wal_lsn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class MariaDBRead:
    """Per-chunk consistent snapshots of MariaDB, each reporting its binlog position."""

    source: SourceConfig
    highest_seq: int = 0  # the furthest position any chunk read at
    _gtids: dict[tuple[str, int], int] = field(default_factory=dict)

    def open(self) -> MariaDBRead:
        return self

    def session_init(self) -> str:
        return "SET time_zone = '+00:00'; START TRANSACTION WITH CONSISTENT SNAPSHOT"

    def position_columns(self) -> str:
        """Columns that report, inside the chunk's own snapshot, where it stands in the binlog."""
        status = "(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = '{}')"
        return (
            f"{status.format('BINLOG_SNAPSHOT_FILE')} AS {MARIA_FILE}, "
            f"{status.format('BINLOG_SNAPSHOT_POSITION')} AS {MARIA_POS}"
        )

    def count(self, qualified: str) -> int:
        return int(self._query(f"SELECT count(*) FROM {qualified}")[0][0])

    def key_bounds(self, qualified: str, column: str) -> tuple[Any, Any]:
        return tuple(self._query(f"SELECT min(`{column}`), max(`{column}`) FROM {qualified}")[0])

    def version(self, binlog_file: str, binlog_pos: int) -> int:
        """The version of a row read at this binlog position: above every change it reflects."""
        key = (binlog_file, int(binlog_pos))
        if key not in self._gtids:
            seq = _seq_at(self.source, *key)
            if seq is None:
                raise FatalError(
                    f"source {self.source.name}: binlog position {key} has no GTID position; is binary logging on?"
                )
            self._gtids[key] = seq
        seq = self._gtids[key]
        self.highest_seq = max(self.highest_seq, seq)
        return (seq << MINOR_BITS) | MINOR_MAX

    def reflects(self, gtid_seq: int) -> bool:
        return gtid_seq <= self.highest_seq

    def mark(self) -> None:
        """Nothing to write: the connector's offset reaches the last GTID even when the server is idle."""

    def passed(self, offset: dict[str, Any]) -> bool:
        seen = [_domain0_seq(self.source.name, offset.get(k) or "", strict=False) for k in ("gtids", "transaction_id")]
        return max(seen) >= self.highest_seq

    def close(self) -> None:
        pass

    def _query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        return _query(self.source, sql, params)


class BinlogPositions:
    """``events.BinlogSeq`` for the MariaDB/MySQL sources of a config: snapshot rows' positions to GTID sequences.

    One query per snapshot position (every row of a Debezium snapshot shares
    it), cached for the life of the process. Picklable: it holds only the
    source configs, and connects when asked.
    """

    def __init__(self, sources: Iterable[SourceConfig]) -> None:
        self.sources = {s.name: s for s in sources if s.kind != "postgres"}
        self._seqs: dict[tuple[str, str, int], int | None] = {}

    @classmethod
    def of(cls, config: Config) -> BinlogPositions:
        return cls(config.sources)

    def __call__(self, source: str, binlog_file: str, binlog_pos: int) -> int | None:
        key = (source, binlog_file, binlog_pos)
        if key not in self._seqs:
            if source not in self.sources:
                raise FatalError(f"snapshot row of source {source!r}, which the config does not declare")
            self._seqs[key] = _seq_at(self.sources[source], binlog_file, binlog_pos)
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
        consumer = Consumer(
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


def _seq_at(source: SourceConfig, binlog_file: str, binlog_pos: int) -> int | None:
    """The domain-0 GTID sequence of the last transaction before this binlog position; None if unknown."""
    rows = _query(source, "SELECT BINLOG_GTID_POS(%s, %s)", (binlog_file, binlog_pos))
    position = rows[0][0] if rows else None
    return None if position is None else _domain0_seq(source.name, position)


def _query(source: SourceConfig, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    conn = connect_mariadb(source)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    except pymysql.MySQLError as err:
        raise FatalError(f"source {source.name}: {sql.split()[0]} failed: {err}") from None
    finally:
        conn.close()


SourceRead = PostgresRead | MariaDBRead


def open_read(source: SourceConfig) -> SourceRead:
    return (PostgresRead(source) if source.kind == "postgres" else MariaDBRead(source)).open()


def wait_passed(read: SourceRead, connect: ConnectClient, timeout_s: float = 300, poll_s: float = 0.5) -> float:
    """Block until the connector's committed offset is past the read; return the seconds waited.

    Kafka Connect commits a source offset only once every record before it is
    acknowledged by Kafka, so from then on the reflected changes are all in
    their topics. How soon depends on the worker's ``offset.flush.interval.ms``.
    """
    read.mark()
    name, started = read.source.name, time.monotonic()
    while True:
        offsets = connect.offsets(name)
        if any(read.passed(o.get("offset") or {}) for o in offsets):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise FatalError(
                f"connector {name} has not passed the snapshot's position within {timeout_s:.0f}s "
                f"(committed offsets: {orjson.dumps(offsets).decode()[:300]}); is it running? "
                "(cdcsync connectors status)"
            )
        time.sleep(poll_s)


def _domain0_seq(source: str, position: str, strict: bool = True) -> int:
    """The sequence number of GTID domain 0 in a position like ``0-1-42,1-5-7``."""
    for gtid in position.split(","):
        parts = gtid.strip().split("-")
        if len(parts) == 3 and parts[0] == "0" and parts[2].isdigit():
            return int(parts[2])
    if strict and position:
        raise FatalError(f"source {source}: GTID position {position!r} has no domain 0; cdcsync orders domain 0 only")
    return 0
