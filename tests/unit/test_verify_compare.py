"""sync.verify.compare: the two sides spilled to disk, each kind of difference counted exactly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcsync.sync.sink import Digesting
from cdcsync.sync.verify import compare as verify
from cdcsync.sync.verify import spill as verify_spill
from cdcsync.sync.verify.compare import TableReport, compare


def test_missing_extra_and_stale_ids_are_found_and_counted() -> None:
    source = [("1", b"a"), ("2", b"b"), ("3", b"c"), ("4", b"d")]
    store = [("2", b"b"), ("3", b"x"), ("5", b"e"), ("6", b"f")]
    report = TableReport("f", "pg.public.t", "t")
    compare(source, store, report)
    assert (report.source_rows, report.store_rows) == (4, 4)
    assert (report.missing, report.extra, report.stale) == (["1", "4"], ["5", "6"], ["3"])
    assert (report.missing_count, report.extra_count, report.stale_count) == (2, 2, 1)
    assert not report.clean


def test_equal_sides_are_clean_and_an_id_met_twice_counts_once_with_its_last_value() -> None:
    report = TableReport("f", "pg.public.t", "t")
    compare([("1", b"a"), ("2", b"b")], [("2", b"old"), ("1", b"a"), ("2", b"b")], report)
    assert report.clean and (report.source_rows, report.store_rows) == (2, 2)


def test_ids_listed_are_bounded_in_id_order_but_the_counts_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "LISTED", 3)
    monkeypatch.setattr(verify, "SPILL_ROWS", 7)  # several batches per side
    source = ((str(i), b"v") for i in range(100))
    report = TableReport("f", "pg.public.t", "t")
    compare(source, iter([]), report)
    assert report.missing == ["0", "1", "10"] and report.missing_count == 100 == report.source_rows
    assert report.as_dict()["missing_count"] == 100 and len(report.as_dict()["missing"]) == 3


def test_a_side_that_fails_fails_the_comparison_and_stops_the_other() -> None:
    read: list[int] = []

    def source() -> Iterator[tuple[str, bytes]]:
        for i in range(1_000_000):
            read.append(i)
            yield str(i), b"v"

    def store() -> Iterator[tuple[str, bytes]]:
        yield "1", b"v"
        raise ConnectionError("store went away")

    with pytest.raises(ConnectionError, match="store went away"):
        compare(source(), store(), TableReport("f", "pg.public.t", "t"))
    assert len(read) < 1_000_000  # stopped at a batch boundary, not read to the end


def test_parts_too_large_are_split_again_and_every_difference_is_still_found_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(verify_spill, "PARTS", 4)
    monkeypatch.setattr(verify_spill, "CHUNK_ROWS", 3)  # many chunks per part
    monkeypatch.setattr(verify_spill, "PART_ROWS", 10)  # 2,000 ids in 4 parts: split twice
    source = {f"k{i}": b"v" for i in range(2000)}
    store = {**{f"k{i}": b"v" for i in range(300, 2000)}, **{f"x{i}": b"v" for i in range(40)}}
    store.update({f"k{i}": b"changed" for i in range(1990, 2000)})
    report = TableReport("f", "pg.public.t", "t")
    compare(source.items(), list(store.items()) + [("k5", b"v")], report)  # k5: in the store twice, last wins
    assert (report.source_rows, report.store_rows) == (2000, len(store) + 1)
    assert report.missing_count == 299 and report.missing[:3] == ["k0", "k1", "k10"]
    assert report.extra_count == 40 and report.extra == sorted(f"x{i}" for i in range(40))
    assert report.stale_count == 10 and report.stale == sorted(f"k{i}" for i in range(1990, 2000))


class _Scanned:
    """A store read row by row (Elasticsearch's, Redis's way): plain data."""

    def __init__(self, rows: dict[str, dict[str, object]]) -> None:
        self.rows = rows

    def scan(self, target: str) -> Iterator[tuple[str, int, dict[str, object]]]:
        return ((ident, 1, doc) for ident, doc in self.rows.items())


class _Digested(_Scanned, Digesting):
    """A store that declares it digests its rows where they are (Delta's way)."""

    def digests(self, target: str, digest: object, where: str | None = None) -> Iterator[tuple[str, bytes]]:
        return ((ident, b"digested " + ident.encode()) for ident in self.rows)

    def kinds(self, target: str) -> dict[str, str | None]:
        return {"a": "int", "b": "text"}

    def sums(self, target: str, bucket: str, hashed: str, aggregates: object) -> list[tuple[object, ...]]:
        return []


class _Undeclared(_Scanned):
    """A store with a ``digests`` of its own that does not declare the role."""

    def digests(self, target: str, digest: object, where: str | None = None) -> Iterator[tuple[str, bytes]]:
        raise AssertionError("a role is read from the declaration, not from the members")


def test_a_store_that_digests_its_rows_is_read_as_digests_unless_the_pass_is_paced() -> None:
    rows: dict[str, dict[str, object]] = {"1": {"a": 1}, "2": {"a": None, "b": "x"}}
    scanned = [(ident, verify.digest(doc)) for ident, doc in rows.items()]
    assert list(verify.store_pairs(_Scanned(rows), "t", None)) == scanned
    assert list(verify.store_pairs(_Digested(rows), "t", None)) == [("1", b"digested 1"), ("2", b"digested 2")]
    assert list(verify.store_pairs(_Digested(rows), "t", 1e6)) == scanned
    assert list(verify.store_pairs(_Undeclared(rows), "t", None)) == scanned  # digests, but never said it does
