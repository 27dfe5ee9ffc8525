"""sync.keys (ids back to SQL conditions) and sync.verify.recheck (rows that moved during a pass)."""

from __future__ import annotations

from collections.abc import Collection

from cdcsync.sync.keys import key_filter, key_parts, readable
from cdcsync.sync.mapping import TableMapping, doc_id
from cdcsync.sync.verify.compare import TableReport, recheck

COMPOSITE = TableMapping("public.t", "t", key_columns=("region", "id"), types={"id": "int"})


def test_a_composite_id_splits_back_into_the_key_texts_it_was_made_of() -> None:
    for key in ({"region": "eu|west", "id": 7}, {"region": "back\\slash", "id": 8}, {"region": "", "id": 9}):
        ident = doc_id(key, COMPOSITE)
        assert key_parts(ident, 2) == (key["region"], str(key["id"]))
    assert key_parts("a|b|c", 2) is None and key_parts("7", 1) == ("7",)


def test_ids_become_one_condition_of_literals_quoted_for_each_database() -> None:
    ids = [doc_id({"region": "o'neil\\x", "id": 1}, COMPOSITE), "eu|2"]
    assert key_filter("postgres", COMPOSITE, ids) == """("region", "id") IN (('o''neil\\x', '1'), ('eu', '2'))"""
    assert key_filter("mariadb", COMPOSITE, ids) == """(`region`, `id`) IN (('o''neil\\\\x', '1'), ('eu', '2'))"""
    raw = TableMapping("public.b", "b", key_columns=("k",), types={"k": "bytes"})
    assert key_filter("postgres", raw, ["AAE="]) == """"k" IN (decode('AAE=', 'base64'))"""
    assert key_filter("postgres", TableMapping("public.n", "n"), ["1"]) is None  # no key columns known


def test_only_keys_whose_ids_read_back_exactly_are_looked_up() -> None:
    assert readable(COMPOSITE)
    assert not readable(TableMapping("public.t", "t", key_columns=("at",), types={"at": "timestamp"}))
    assert not readable(TableMapping("public.t", "t"))


def looks(*answers: dict[str, tuple[bytes | None, bytes | None]]):  # type: ignore[no-untyped-def]
    """A ``look`` that gives these answers in turn and records what it was asked."""
    asked: list[list[str]] = []

    def look(ids: Collection[str]) -> dict[str, tuple[bytes | None, bytes | None]]:
        asked.append(sorted(ids))
        answer = answers[min(len(asked), len(answers)) - 1]
        return {i: answer.get(i, (b"same", b"same")) for i in ids}

    return look, asked


def report() -> TableReport:
    r = TableReport("f", "pg.public.t", "t", missing=["1"], extra=["2"], stale=["3", "4"])
    r.missing_count, r.extra_count, r.stale_count = 1, 1, 5  # 3 stale rows past what is listed
    return r


def test_a_row_that_agrees_once_leaves_the_report_and_one_that_still_differs_stays_in_its_last_kind() -> None:
    r = report()
    look, asked = looks(
        {"1": (b"a", None), "2": (None, b"b"), "3": (b"new", b"old")},  # 4 agrees now
        {"1": (b"a", None), "2": (None, b"b"), "3": (None, b"old")},  # 3 was deleted at the source meanwhile
    )
    recheck(r, look, pauses=(0, 0, 0))
    assert asked == [["1", "2", "3", "4"], ["1", "2", "3"], ["1", "2", "3"]]
    assert (r.missing, r.extra, r.stale) == (["1"], ["2", "3"], [])
    assert (r.missing_count, r.extra_count, r.stale_count) == (1, 2, 3)


def test_a_row_the_follower_applied_late_is_no_divergence() -> None:
    r = report()
    look, asked = looks({"1": (b"a", None), "2": (None, b"b"), "3": (b"x", b"y"), "4": (b"x", b"y")}, {})
    recheck(r, look, pauses=(0, 0, 0))
    assert len(asked) == 2 and (r.missing_count, r.extra_count, r.stale_count) == (0, 0, 3)


def test_a_row_changing_faster_than_the_follower_applies_it_is_in_flight_while_its_store_copy_moves() -> None:
    r = report()
    look, asked = looks(
        {"1": (b"a", None), "2": (None, b"b"), "3": (b"s1", b"s0"), "4": (b"x", b"y")},
        {"1": (b"a", None), "2": (None, b"b"), "3": (b"s2", b"s1"), "4": (b"x2", b"y")},  # 3's copy moved
        {"1": (b"a", None), "2": (None, b"b"), "4": (b"x3", b"y")},  # 4's copy never moves: a stuck row
    )
    recheck(r, look, pauses=(0, 0, 0))
    assert asked == [["1", "2", "3", "4"], ["1", "2", "3", "4"], ["1", "2", "4"]]
    assert (r.missing, r.extra, r.stale) == (["1"], ["2"], ["4"])


def test_without_a_lookup_the_pass_findings_stand() -> None:
    r = report()
    recheck(r, lambda ids: {}, pauses=(0,))
    assert (r.missing, r.extra, r.stale, r.stale_count) == (["1"], ["2"], ["3", "4"], 5)


def test_a_table_the_follower_does_not_follow_is_refused_naming_those_it_does() -> None:
    import pytest

    from cdcsync.config import Config
    from cdcsync.errors import ConfigError
    from cdcsync.sync.verify.compare import verify_follower

    config = Config.model_validate(
        {
            "sources": [
                {
                    "name": "pg",
                    "kind": "postgres",
                    "port": 5432,
                    "database": "d",
                    "user": "u",
                    "password": "x",
                    "tables": ["public.t"],
                }
            ],
            "followers": [{"name": "cache", "kind": "redis", "url": "redis://127.0.0.1:1/0"}],
        }
    )
    with pytest.raises(ConfigError, match=r"follows no table pg\.public\.nope; it follows: pg\.public\.t"):
        verify_follower(config, config.follower("cache"), sink=None, only="pg.public.nope")  # type: ignore[arg-type]


def test_every_differing_row_is_looked_at_again_not_only_those_listed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A pass under writes finds most rows moved: each is looked at, ``LISTED`` at a time, and the report ends
    with the rows that still differ only, counted exactly."""
    import cdcsync.sync.verify.compare as verify
    import cdcsync.sync.verify.recheck as verify_recheck
    from cdcsync.sync.verify.spill import Spill

    for module in (verify, verify_recheck):  # what a report lists, and how many ids a look is asked about
        monkeypatch.setattr(module, "LISTED", 4)
    source = [(str(n), b"new") for n in range(30)]
    store = [(str(n), b"old") for n in range(1, 30)] + [("extra", b"x")]  # 0 missing, 1..29 stale, one extra
    stuck = {"7", "22", "extra"}
    r = TableReport("f", "pg.public.t", "t")
    differing = Spill(tmp_path / "differing")
    verify.compare(source, store, r, differing)
    assert (r.missing_count, r.extra_count, r.stale_count, len(r.stale)) == (1, 1, 29, 4)
    asked: list[int] = []

    def look(ids: Collection[str]) -> dict[str, tuple[bytes | None, bytes | None]]:
        asked.append(len(ids))
        return {i: ((None, b"x") if i == "extra" else (b"new", b"old")) if i in stuck else (b"s", b"s") for i in ids}

    verify.recheck(r, look, pauses=(0, 0), differing=differing)
    differing.close()
    assert max(asked) == 4 and sum(asked) >= 31  # every differing id, four at a time
    assert (r.missing, r.extra, r.stale) == ([], ["extra"], ["22", "7"])
    assert (r.missing_count, r.extra_count, r.stale_count) == (0, 1, 2)


def test_a_large_divergence_that_does_not_settle_is_looked_at_twice_not_at_every_pause(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A store emptied: every row is missing at each look. After a second wave that settled none, the looks end;
    each wave looks at every id, ``LISTED`` at a time."""
    import cdcsync.sync.verify.compare as verify
    import cdcsync.sync.verify.recheck as verify_recheck
    from cdcsync.sync.verify.spill import Spill

    for module in (verify, verify_recheck):  # what a report lists, and how many ids a look is asked about
        monkeypatch.setattr(module, "LISTED", 4)
    r = TableReport("f", "pg.public.t", "t")
    differing = Spill(tmp_path / "differing")
    verify.compare([(str(n), b"row") for n in range(30)], [], r, differing)
    asked: list[int] = []

    def look(ids: Collection[str]) -> dict[str, tuple[bytes | None, bytes | None]]:
        asked.append(len(ids))
        return {i: (b"row", None) for i in ids}

    verify.recheck(r, look, pauses=(0, 0, 0, 0, 0), differing=differing)
    differing.close()
    assert sum(asked) == 2 * 30 and max(asked) == 4
    assert (r.missing_count, len(r.missing), r.missing[:2]) == (30, 4, ["0", "1"])
