"""The change-event contract, on envelopes recorded from the real connectors (fixtures/record.py).

Both fixtures play the same scenario: a snapshot of rows 1 and 2; transaction
A inserts row 10 *before* transaction B inserts and updates row 20, but A
commits after B; row 1 updated three times in one transaction; row 2 deleted;
row 1's primary key updated to 3.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cdcsync.events import Change, PoisonRecord, parse_record, version_of
from cdcsync.sync.follower import last_per_key
from cdcsync.sync.mapping import TableMapping, map_row

FIXTURES = Path(__file__).parent / "fixtures"
KINDS = ["postgres", "mariadb"]


def records(kind: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{kind}.jsonl").read_text().splitlines()]


def parse(rec: dict) -> Change | None:
    value = rec["value"].encode() if rec["value"] is not None else None
    return parse_record(rec["topic"], rec["partition"], rec["offset"], rec["key"].encode(), value)


def changes(kind: str) -> list[Change]:
    return [c for c in map(parse, records(kind)) if c is not None]


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
def test_snapshot_rows_rank_below_every_streamed_change(kind: str) -> None:
    all_changes = changes(kind)
    snapshot = [c for c in all_changes if c.op == "r"]
    assert [c.version for c in snapshot] == [0, 0]
    assert min(c.version for c in all_changes if c.op != "r") > 0


@pytest.mark.parametrize("kind", KINDS)
def test_redelivery_gives_the_same_version(kind: str) -> None:
    for rec in records(kind):
        if rec["value"] is None:
            continue
        envelope = json.loads(rec["value"])
        original = version_of(envelope)
        # Debezium re-sends the same source coordinates with a new envelope clock.
        envelope["ts_ms"] += 12345
        envelope["ts_us"] += 12345000
        assert version_of(envelope) == original


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
    last_commit = json.loads(sequence)[0]
    expected_major = 0 if last_commit is None else int(last_commit) >> 5
    assert version_of(pg) >> 16 == expected_major


@pytest.mark.parametrize("sequence", ['["28515336', '["","1"]', '["12x4","1"]', '["²","1"]', '["-5","1"]', "[]", "7"])
def test_malformed_sequence_is_poison(sequence: str) -> None:
    pg = envelope()
    pg["source"]["sequence"] = sequence
    with pytest.raises(PoisonRecord, match="sequence"):
        version_of(pg)
