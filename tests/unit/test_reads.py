"""Where a read of the source stands: Postgres visibility by transaction id, MariaDB GTID positions."""

from __future__ import annotations

import pytest

from cdcsync.config import SourceConfig
from cdcsync.errors import FatalError
from cdcsync.sources.mariadb.binlog import domain0_seq
from cdcsync.sources.mariadb.snapshot import MariaDBRead
from cdcsync.sources.postgres.snapshot import PostgresRead

PG = SourceConfig(name="pg", kind="postgres", port=5432, database="d", user="u", password="x", tables=["public.t"])
MARIA = SourceConfig(name="ma", kind="mariadb", port=3306, database="d", user="u", password="x", tables=["d.t"])


def test_postgres_visibility_follows_xmin_xmax_and_the_in_progress_list() -> None:
    read = PostgresRead(PG, xmin=100, xmax=105, xip=frozenset({100, 103}))
    assert read.reflects(99) and read.reflects(101) and read.reflects(104)
    assert not read.reflects(100) and not read.reflects(103)  # in progress when the snapshot was taken
    assert not read.reflects(105) and not read.reflects(200)  # began after it


def test_postgres_visibility_compares_32_bit_xids_across_an_epoch() -> None:
    epoch = 3 << 32
    read = PostgresRead(PG, xmin=epoch + 10, xmax=epoch + 12, xip=frozenset({(epoch + 10) % (1 << 32)}))
    assert read.reflects(11)  # Debezium reports the xid without its epoch
    assert not read.reflects(10) and not read.reflects(12)
    wrapped = PostgresRead(PG, xmin=(1 << 32) + 2, xmax=(1 << 32) + 2)
    assert wrapped.reflects((1 << 32) - 5)  # just before the wrap: older
    assert not wrapped.reflects(3)


def test_postgres_has_passed_the_read_once_a_commit_at_or_after_it_is_committed() -> None:
    read = PostgresRead(PG, wal_lsn=1000)
    assert not read.passed({"lsn_commit": 999}) and read.passed({"lsn_commit": 1000}) and not read.passed({})


def test_mariadb_gtid_positions_and_passing() -> None:
    assert domain0_seq("ma", "0-1-42") == 42
    assert domain0_seq("ma", "1-5-7,0-1-42") == 42
    with pytest.raises(FatalError, match="domain 0"):
        domain0_seq("ma", "1-5-7")
    read = MariaDBRead(MARIA, highest_seq=42)
    assert read.passed({"gtids": "0-1-42"}) and read.passed({"gtids": "0-1-40", "transaction_id": "0-1-43"})
    assert not read.passed({"gtids": "0-1-41"})
    assert read.reflects(42) and not read.reflects(43)
