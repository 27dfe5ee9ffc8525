"""The change-event contract: one Debezium record -> one ``Change`` with a version.

A version is one signed 64-bit integer (Elasticsearch's external version),
built so that for a given key it is

1. monotonic in the source's commit order, and comparable with snapshot rows;
2. stable under redelivery: it is computed from the source coordinates only,
   never from the envelope's ``ts_ms`` (the connector's clock);
3. the same number in every sink.

Layout: ``major << 16 | minor``.

- ``minor`` is the event's position in its transaction (Debezium's
  ``transaction.total_order``, 1-based; the connectors run with
  ``provide.transaction.metadata=true``), clamped to 65535. It orders several
  changes of one key inside one transaction. An event without it (written
  before the metadata was enabled) gets 1.
- ``major`` orders transactions:
  - Postgres: ``lastCommitLsn >> 5`` from ``source.sequence``. Debezium emits
    whole transactions in commit order and ``lastCommitLsn`` is the end of the
    commit emitted before, so it increases strictly from one transaction to
    the next, whereas an event's own ``lsn`` does not (interleaved
    transactions). Commit records are at least 34 bytes apart, so dropping 5
    bits keeps them distinct and leaves room for 2^52 bytes of WAL.
    ``lastCommitLsn`` is null only in a connector that has processed no commit
    yet (the first transaction after a new connector's snapshot): that
    transaction commits after the snapshot's position P, and takes
    ``max(own lsn, P) >> 5``. Its own LSN is above every commit before its own
    changes, hence above what the stores hold from an earlier connector; P
    puts it above the snapshot rows even when it began before P (a transaction
    spanning the snapshot); both are below its own commit, hence below the
    next transaction's ``lastCommitLsn``. P is read from the snapshot rows
    before it in its partition (``snapshot_lsn``, ``cdcsync.resolvers``).
  - MariaDB/MySQL: the GTID sequence number (``source.gtid`` is
    ``domain-server-seq``). It survives a failover, unlike ``file``/``pos``.
    One GTID domain per source is assumed; another domain is a poison record.
- Snapshot rows (``op=r``) sit between the last change they reflect and the
  first they do not, so a later snapshot (connector re-created, offsets reset,
  slot lost, incremental snapshot) replaces what streaming wrote before it:
  - Postgres: the Postgres ``major`` of their own ``source.sequence`` with
    minor 0. Streaming after the snapshot continues from that sequence, so the
    first transaction after it has the same major and a minor of at least 1.
  - MariaDB/MySQL: an initial or blocking snapshot row carries the binlog
    ``file``/``pos`` it was read at but no GTID; ``binlog_seq`` (from
    ``cdcsync.resolvers``) turns the position into the sequence *s*
    of the last transaction before it, and the row gets ``s << 16 | 0xFFFF``,
    exactly what ``bootstrap --from source`` gives a row read there. Without
    ``binlog_seq`` such a row gets 0 (right only for a store that holds
    nothing older). An incremental snapshot row carries the GTID of the
    transaction it was emitted in: ``seq << 16``.
See docs/versions-of-changes.md for the alternatives and why they fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from cdcsync.errors import PoisonRecord
from cdcsync.sources import CONNECTORS, for_connector
from cdcsync.sources.changes import MINOR_BITS, MINOR_MAX, BinlogSeq, checked

__all__ = ["MINOR_BITS", "MINOR_MAX", "BinlogSeq", "Change", "PoisonRecord", "Record", "parse_record", "version_of"]


class Record(NamedTuple):
    """One record of a change topic, as Kafka holds it: a Debezium envelope under its key (a tombstone: no value)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


OPS = {"c", "u", "d", "r"}

SnapshotLsn = Callable[[str, int, int], "int | None"]
"""``(topic, partition, offset) -> LSN`` that ranks the snapshot rows before this record in its partition, or None."""


@dataclass(slots=True)
class Change:
    """One row change, as every sink sees it. Never modified once built.

    Not ``frozen``: a frozen dataclass sets each field through
    ``object.__setattr__``, which makes building one (once per record, on the
    hot path) about twice as slow.
    """

    source: str
    table: str  # "namespace.table"
    op: str  # c | u | d | r
    key: dict[str, Any]
    after: dict[str, Any] | None  # None for deletes
    commit_ts_ms: int | None
    version: int
    topic: str
    partition: int
    offset: int

    @property
    def is_delete(self) -> bool:
        return self.op == "d"


def _json(raw: bytes | str, what: str) -> Any:
    try:
        return orjson.loads(raw)  # several times faster than json on Debezium envelopes
    except (orjson.JSONDecodeError, UnicodeDecodeError) as err:
        raise PoisonRecord(f"{what} is not JSON: {err}") from None


def version_of(
    envelope: dict[str, Any], binlog_seq: BinlogSeq | None = None, snapshot_lsn: Callable[[], int | None] | None = None
) -> int:
    """The version of one Debezium change envelope (see the module docstring).

    ``snapshot_lsn`` answers, for this event only, where the snapshot before it stands.
    """
    source = envelope.get("source")
    if not isinstance(source, dict):
        raise PoisonRecord("envelope has no source block")
    return _version(envelope, envelope.get("op"), source, source.get("connector"), binlog_seq, snapshot_lsn)


def _version(
    envelope: dict[str, Any],
    op: Any,
    source: dict[str, Any],
    connector: Any,
    binlog_seq: BinlogSeq | None = None,
    snapshot_lsn: Callable[[], int | None] | None = None,
) -> int:
    kind = for_connector(connector)
    if kind is None:
        raise PoisonRecord(f"unsupported source.connector {connector!r}")
    if op == "r":
        return kind.changes.snapshot_version(source, binlog_seq)
    transaction = envelope.get("transaction")
    if isinstance(transaction, dict) and isinstance(transaction.get("total_order"), int):
        minor = min(max(transaction["total_order"], 1), MINOR_MAX)
    else:
        # Events written before transaction metadata was enabled (compacted history) still order
        # correctly across transactions; only changes of one key inside one such transaction tie.
        minor = 1
    major = kind.changes.major(source, snapshot_lsn)
    return checked((major << MINOR_BITS) | minor, major)


def parse_record(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    binlog_seq: BinlogSeq | None = None,
    snapshot_lsn: SnapshotLsn | None = None,
) -> Change | None:
    """Turn one Kafka record of a Debezium topic into a ``Change``; ``None`` for a tombstone.

    A follower deletes on the ``op=d`` event and ignores the tombstone, which is
    only compaction's marker (Debezium can crash between the two).
    ``binlog_seq`` versions MariaDB/MySQL snapshot rows, ``snapshot_lsn`` the first
    Postgres transaction after a new connector's snapshot (see the module docstring);
    it is asked only for that transaction's events.
    """
    if value is None:
        return None
    if key is None:
        raise PoisonRecord("record has no key; Debezium keys every change by primary key")
    key_doc, envelope = _json(key, "key"), _json(value, "value")
    if not isinstance(key_doc, dict) or not key_doc:
        raise PoisonRecord(f"key {key_doc!r} is not an object of primary-key columns")
    if not isinstance(envelope, dict):
        raise PoisonRecord("value is not a Debezium envelope object")
    op = envelope.get("op")
    if op not in OPS:
        raise PoisonRecord(f"op {op!r} is not one of c, u, d, r")
    source = envelope.get("source") or {}
    connector = source.get("connector") if isinstance(source, dict) else None
    kind = for_connector(connector)
    if kind is None:
        *others, last = CONNECTORS
        raise PoisonRecord(f"source.connector {connector!r} is not {', '.join(others)} or {last}")
    namespace = kind.changes.namespace(source)
    table = source.get("table")
    if not namespace or not table:
        raise PoisonRecord("source block names no table")
    after = envelope.get("after")
    if op == "d":
        after = None
    elif not isinstance(after, dict):
        raise PoisonRecord(f"op {op} has no after-image")
    return Change(
        str(source.get("name", "")),
        f"{namespace}.{table}",
        op,
        key_doc,
        after,
        source.get("ts_ms"),
        _version(
            envelope,
            op,
            source,
            connector,
            binlog_seq,
            None
            if snapshot_lsn is None or not kind.changes.asks_snapshot_position(source)
            else lambda: snapshot_lsn(topic, partition, offset),
        ),
        topic,
        partition,
        offset,
    )
