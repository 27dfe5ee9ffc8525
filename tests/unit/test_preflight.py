"""MariaDB GTID settings that would make versions wrong: each refused with its fix (plain data)."""

from __future__ import annotations

from cdcsync.connectors.preflight import gtid_problems

WHERE = "source m (mariadb h:3306)"


def test_domain_zero_in_strict_mode_passes() -> None:
    assert gtid_problems(0, True, "0-1-336", WHERE) == []
    assert gtid_problems(0, True, "", WHERE) == []  # a new server has written no GTID yet


def test_another_domain_is_named_with_the_setting_to_change() -> None:
    [problem] = gtid_problems(2, True, "", WHERE)
    assert problem.startswith(WHERE) and "gtid_domain_id is 2" in problem and "--gtid-domain-id=0" in problem


def test_a_binlog_with_several_domains_is_refused() -> None:
    [problem] = gtid_problems(0, True, "0-1-336,3-1-12", WHERE)
    assert "domain(s) 3" in problem and "0-1-336,3-1-12" in problem


def test_strict_mode_off_is_refused_with_the_statement_that_fixes_it() -> None:
    [problem] = gtid_problems(0, False, "0-1-5", WHERE)
    assert "gtid_strict_mode is OFF" in problem and "SET GLOBAL gtid_strict_mode = ON" in problem
