"""The change-event contract, on envelopes recorded from the real connectors (fixtures/record.py).

``<kind>.jsonl`` play the same scenario: a snapshot of rows 1 and 2;
transaction A inserts row 10 *before* transaction B inserts and updates row
20, but A commits after B; row 1 updated three times in one transaction; row 2
deleted; row 1's primary key updated to 3.

``<kind>-resnapshot.jsonl``: rows 1..3 snapshotted, then each updated to v=1;
capture lost (connector stopped, its offsets and, on Postgres, its slot
deleted); meanwhile row 1 set to v=2, row 2 deleted, row 4 inserted; capture
re-created, which snapshots rows 3, 1, 4 again; then row 3 and row 4 set to
v=3, one transaction each. ``mariadb-resnapshot.positions.json`` is what
``BINLOG_GTID_POS`` answered for the snapshot rows' binlog positions.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cdcsync import resolvers
from cdcsync.events import Change, PoisonRecord, parse_record, version_of
from cdcsync.sources.mariadb import binlog
from cdcsync.sources.mariadb.snapshot import MariaDBRead
from cdcsync.sync.chunks import last_per_key
from cdcsync.sync.mapping import TableMapping, map_row

FIXTURES = Path(__file__).parent / "fixtures"
KINDS = ["postgres", "mariadb"]


def records(kind: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{kind}.jsonl").read_text().splitlines()]


def recorded_gtid_pos(source: str, binlog_file: str, binlog_pos: int) -> int | None:
    """``events.BinlogSeq`` answering from what the server answered when the fixture was recorded."""
    answers = json.loads((FIXTURES / "mariadb-resnapshot.positions.json").read_text())
    answer = answers.get(f"{binlog_file}:{binlog_pos}")
    return None if answer is None else int(answer.split("-")[2])


def parse(rec: dict, binlog_seq: object = None) -> Change | None:
    value = rec["value"].encode() if rec["value"] is not None else None
    args = (rec["topic"], rec["partition"], rec["offset"], rec["key"].encode(), value)
    return parse_record(*args, binlog_seq) if binlog_seq else parse_record(*args)  # type: ignore[arg-type]


def changes(kind: str) -> list[Change]:
    seq = recorded_gtid_pos if kind == "mariadb-resnapshot" else None
    return [c for c in (parse(r, seq) for r in records(kind)) if c is not None]


def apply_in_log_order(all_changes: list[Change]) -> dict[int, tuple[int, dict | None]]:
    """What a store holds after the changes, one at a time, under the apply rule (newer version wins)."""
    held: dict[int, tuple[int, dict | None]] = {}
    for c in all_changes:
        key = c.key["id"]
        if key not in held or c.version > held[key][0]:
            held[key] = (c.version, c.after)
    return held


@pytest.mark.parametrize("kind", KINDS)
def test_versions_increase_strictly_in_commit_order(kind: str) -> None:
    streamed = [c for c in changes(kind) if c.op != "r"]
    versions = [c.version for c in streamed]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(0 < v < 2**63 for v in versions)


def test_postgres_fixture_has_the_interleaving_trap_that_lsn_would_get_wrong() -> None:
    values = [json.loads(r["value"]) for r in records("postgres") if r["value"]]
    streamed = [v for v in values if v["op"] != "r"]
    lsns = [v["source"]["lsn"] for v in streamed]
    # A's first change was written before B's but is emitted (committed) after it.
    assert lsns != sorted(lsns)
    assert [c.version for c in changes("postgres") if c.op != "r"] == sorted(
        c.version for c in changes("postgres") if c.op != "r"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_first_snapshot_rows_rank_below_every_streamed_change(kind: str) -> None:
    all_changes = changes(kind)
    snapshot = [c for c in all_changes if c.op == "r"]
    assert len(snapshot) == 2 and len({c.version for c in snapshot}) == 1
    assert max(c.version for c in snapshot) < min(c.version for c in all_changes if c.op != "r")


@pytest.mark.parametrize("kind", KINDS)
def test_a_later_snapshot_replaces_what_streaming_wrote_before_it(kind: str) -> None:
    held = apply_in_log_order(changes(f"{kind}-resnapshot"))
    assert {k: after for k, (_v, after) in held.items()} == {
        1: {"id": 1, "v": 2},  # changed while capture was gone: only the new snapshot has it
        2: {"id": 2, "v": 1},  # deleted while capture was gone: no snapshot can say so (verify does)
        3: {"id": 3, "v": 3},  # the first transaction after the new snapshot
        4: {"id": 4, "v": 3},
    }


@pytest.mark.parametrize("kind", KINDS)
def test_snapshot_rows_sit_between_what_they_reflect_and_what_follows(kind: str) -> None:
    all_changes = changes(f"{kind}-resnapshot")
    versions = [c.version for c in all_changes]
    ops = "".join(c.op for c in all_changes)
    assert ops == "rrruuurrruu"
    first, streamed, second, after = versions[:3], versions[3:6], versions[6:9], versions[9:]
    assert len(set(first)) == 1 and len(set(second)) == 1
    assert max(first) < min(streamed) and max(streamed) < min(second) and max(second) < min(after)
    assert after == sorted(after) and all(0 < v < 2**63 for v in versions)


def test_postgres_first_transaction_after_a_snapshot_is_ranked_by_its_own_lsn() -> None:
    values = [json.loads(r["value"]) for r in records("postgres-resnapshot")]
    # Debezium 3.2: a new connector has processed no commit yet, so lastCommitLsn is null.
    assert [json.loads(v["source"]["sequence"])[0] for v in values[6:10]] == [None] * 4
    snapshot, first_after = values[6], values[9]
    assert version_of(snapshot) == (snapshot["source"]["lsn"] >> 5) << 16
    assert version_of(first_after) == (first_after["source"]["lsn"] >> 5) << 16 | 1
    held = max(version_of(v) for v in values[3:6])
    assert held < version_of(snapshot) < version_of(first_after) < version_of(values[10])


def test_a_first_transaction_that_spans_the_snapshot_ranks_above_its_rows() -> None:
    """Its events carry no lastCommitLsn and an own LSN below P: the snapshot's P ranks them."""
    values = [json.loads(r["value"]) for r in records("postgres-resnapshot")]
    snapshot, first_after, next_after = values[6], values[9], values[10]
    p = snapshot["source"]["lsn"]
    spanning = json.loads(json.dumps(first_after))
    spanning["source"]["lsn"] = p - 4096  # written before the slot became consistent
    spanning["source"]["sequence"] = json.dumps([None, str(p - 4096)])
    assert version_of(spanning) < version_of(snapshot), "without P it loses to the snapshot row"
    ranked = version_of(spanning, snapshot_lsn=lambda: p)
    assert version_of(snapshot) < ranked < version_of(next_after)
    # P never lowers a version: a transaction that began after P keeps its own LSN.
    assert version_of(first_after, snapshot_lsn=lambda: p) == version_of(first_after)


def test_snapshot_lsn_reads_back_over_the_first_transaction_to_the_snapshot_rows() -> None:
    """``SnapshotLsns``' rule for each record it meets reading back, on the recorded envelopes."""
    rank = [resolvers._rank_of(r["value"].encode()) for r in records("postgres-resnapshot")]
    p = json.loads(records("postgres-resnapshot")[6]["value"])["source"]["lsn"]
    assert rank[6:9] == [("snapshot", p)] * 3  # the new connector's snapshot: the answer
    assert rank[9] == ("first", None)  # its first transaction: read on past it
    assert rank[4] == ("streamed", None) and rank[10] == ("streamed", None)  # an earlier connector's stream: None
    assert resolvers._rank_of(None) == (None, None)  # a tombstone: read on past it


def test_mariadb_snapshot_rows_carry_a_binlog_position_and_no_gtid() -> None:
    source = json.loads(records("mariadb-resnapshot")[6]["value"])["source"]
    assert source["gtid"] is None and source["file"].startswith("mariadb-bin.") and source["pos"] > 0
    rec = records("mariadb-resnapshot")[6]
    with_seq = parse(rec, recorded_gtid_pos)
    assert with_seq is not None and with_seq.version == (442 << 16) | 0xFFFF
    without = parse(rec)  # no lookup: the old rank, right only for a store that holds nothing older
    assert without is not None and without.version == 0


def test_mariadb_snapshot_rows_and_bootstrap_rows_read_at_one_position_get_one_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = json.loads((FIXTURES / "mariadb-resnapshot.positions.json").read_text())
    monkeypatch.setattr(binlog, "query", lambda _source, _sql, params: [(answers.get(f"{params[0]}:{params[1]}"),)])
    from cdcsync.config import SourceConfig

    src = SourceConfig.model_validate(
        {
            "name": "ma",
            "kind": "mariadb",
            "host": "h",
            "port": 1,
            "database": "d",
            "user": "u",
            "password": "p",
            "tables": ["d.t"],
        }
    )
    rec = records("mariadb-resnapshot")[6]
    value = json.loads(rec["value"])
    value["source"]["name"] = "ma"
    envelope_version = version_of(value, resolvers.BinlogPositions([src]))
    bootstrap_version = MariaDBRead(src).version(value["source"]["file"], value["source"]["pos"])
    assert envelope_version == bootstrap_version == (442 << 16) | 0xFFFF


def test_a_snapshot_position_the_server_no_longer_knows_is_poison() -> None:
    rec = records("mariadb-resnapshot")[6]
    with pytest.raises(PoisonRecord, match="has no GTID position"):
        parse(rec, lambda _source, _file, _pos: None)


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_snapshot_rows_rank_just_below_the_transaction_they_are_emitted_in(kind: str) -> None:
    # An incremental snapshot emits its rows while streaming, with the streaming position in source.
    streamed = [json.loads(r["value"]) for r in records(f"{kind}-resnapshot")][3:6]
    middle = streamed[1]
    row = json.loads(records(f"{kind}-resnapshot")[6]["value"])
    row["source"] = {**middle["source"], "snapshot": "incremental"}
    assert version_of(streamed[0]) < version_of(row) < version_of(middle) < version_of(streamed[2])


@pytest.mark.parametrize("kind", [*KINDS, "postgres-resnapshot", "mariadb-resnapshot"])
def test_redelivery_gives_the_same_version(kind: str) -> None:
    seq = recorded_gtid_pos if kind == "mariadb-resnapshot" else None
    for rec in records(kind):
        if rec["value"] is None:
            continue
        envelope = json.loads(rec["value"])
        original = version_of(envelope, seq) if seq else version_of(envelope)
        # Debezium re-sends the same source coordinates with a new envelope clock.
        envelope["ts_ms"] += 12345
        envelope["ts_us"] += 12345000
        assert (version_of(envelope, seq) if seq else version_of(envelope)) == original


@pytest.mark.parametrize("kind", KINDS)
def test_tombstones_are_not_changes_and_deletes_carry_no_image(kind: str) -> None:
    parsed = [parse(r) for r in records(kind)]
    assert [i for i, c in enumerate(parsed) if c is None] == [10, 12]
    deletes = [c for c in parsed if c is not None and c.is_delete]
    assert [(d.key, d.after) for d in deletes] == [({"id": 2}, None), ({"id": 1}, None)]


@pytest.mark.parametrize("kind", KINDS)
def test_last_per_key_keeps_the_newest_whatever_the_order(kind: str) -> None:
    all_changes = changes(kind)
    for seed in range(5):
        shuffled = all_changes[:]
        random.Random(seed).shuffle(shuffled)
        mapping = TableMapping(shuffled[0].table, "t", ("id",))
        rows = last_per_key(map_row(c, mapping) for c in shuffled)
        final = {r.change.key["id"]: (r.change.op, r.change.after) for r in rows}
        assert final == {
            1: ("d", None),
            2: ("d", None),
            3: ("c", {"id": 3, "v": 7}),
            10: ("u", {"id": 10, "v": 2}),
            20: ("u", {"id": 20, "v": 2}),
        }


@pytest.mark.parametrize("kind", KINDS)
def test_table_key_and_commit_time(kind: str) -> None:
    c = changes(kind)[2]
    assert c.table.endswith(c.topic.rsplit(".", 1)[1])
    assert c.key == {"id": 20} and isinstance(c.commit_ts_ms, int)
    assert (c.partition, c.offset) == (0, 2)


def envelope(**overrides: object) -> dict:
    base = json.loads(next(r["value"] for r in records("postgres") if r["value"] and '"op": "u"' in r["value"]))
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "key,value,reason",
    [
        (b'{"id":1}', b"not json", "value is not JSON"),
        (None, b"{}", "record has no key"),
        (b"[1]", b"{}", "is not an object of primary-key columns"),
        (b'{"id":1}', json.dumps(envelope(op="x")).encode(), "op 'x' is not one of"),
        (b'{"id":1}', json.dumps(envelope(after=None)).encode(), "has no after-image"),
        (b'{"id":1}', json.dumps(envelope(source={"connector": "oracle"})).encode(), "is not postgresql, mariadb"),
    ],
)
def test_poison_records_say_why(key: bytes | None, value: bytes, reason: str) -> None:
    with pytest.raises(PoisonRecord, match=reason):
        parse_record("t", 0, 0, key, value)


def test_events_from_before_transaction_metadata_still_order_across_transactions() -> None:
    streamed = [json.loads(r["value"]) for r in records("postgres") if r["value"] and '"op": "r"' not in r["value"]]
    versions = []
    for value in streamed:
        value["transaction"] = None
        versions.append(version_of(value))
    assert all(v & 0xFFFF == 1 for v in versions)
    assert versions == sorted(versions)  # ties only inside one transaction


def test_other_gtid_domain_and_overflow_are_poison() -> None:
    maria = json.loads(next(r["value"] for r in records("mariadb") if r["value"] and '"op": "u"' in r["value"]))
    maria["source"]["gtid"] = "7-1-100"
    with pytest.raises(PoisonRecord, match="GTID domain 7"):
        version_of(maria)
    pg = envelope()
    pg["source"]["sequence"] = json.dumps([str(2**70), "1"])
    with pytest.raises(PoisonRecord, match="overflows"):
        version_of(pg)


@pytest.mark.parametrize(
    "sequence",
    ['["28515336","28515400"]', '[ "28515336", "28515400" ]', '[28515336,"28515400"]', '[null,"28515336"]'],
)
def test_sequence_read_by_the_shortcut_or_as_json_gives_one_version(sequence: str) -> None:
    pg = envelope()
    pg["source"]["sequence"] = sequence
    last_commit, lsn = json.loads(sequence)
    expected_major = int(lsn if last_commit is None else last_commit) >> 5
    assert version_of(pg) >> 16 == expected_major


@pytest.mark.parametrize(
    "sequence",
    ['["28515336', '["","1"]', '["12x4","1"]', '["²","1"]', '["-5","1"]', "[]", "7", "[null,null]", '[null,"x"]'],
)
def test_malformed_sequence_is_poison(sequence: str) -> None:
    pg = envelope()
    pg["source"]["sequence"] = sequence
    with pytest.raises(PoisonRecord, match="sequence"):
        version_of(pg)
