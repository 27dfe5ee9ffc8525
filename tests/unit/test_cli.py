"""The command line: instant help, options show their environment variables, config errors exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cdcsync(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdcsync", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_help_lists_commands_without_importing_heavy_modules() -> None:
    probe = (
        "import sys; from cdcsync.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('pyspark', 'confluent_kafka', 'psycopg', 'elasticsearch') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "connectors" in done.stdout
    assert "HEAVY []" in done.stdout
    assert "CDCSYNC_CONFIG" in done.stdout  # options show their environment variable


def test_missing_config_file_exits_2_with_the_path(tmp_path: Path) -> None:
    done = cdcsync("--config", str(tmp_path / "nope.yaml"), "connectors", "status", cwd=tmp_path)
    assert done.returncode == 2
    assert "nope.yaml not found" in done.stderr


def test_unknown_command_is_a_usage_error() -> None:
    assert cdcsync("frobnicate").returncode == 2


def test_bootstrap_help_names_both_origins_and_the_partitions() -> None:
    done = cdcsync("bootstrap", "--help")
    assert done.returncode == 0
    assert "[topics|source]" in done.stdout and "--partitions" in done.stdout and "--table" in done.stdout


def test_bootstrap_progress_line_shows_rows_rate_and_eta(capsys) -> None:  # type: ignore[no-untyped-def]
    from cdcsync.snapshot.replay import progress_bar

    progress_bar(2500, 10000, 2.0)
    line = capsys.readouterr().err
    assert "2,500/10,000 records" in line and "1,250/s" in line and "ETA 6s" in line


def test_reindex_is_listed_and_documents_its_options() -> None:
    listed = cdcsync("--help")
    assert "reindex" in listed.stdout
    done = cdcsync("reindex", "--help")
    assert done.returncode == 0
    assert "--table" in done.stdout and "--json" in done.stdout and "Exit 0 done, 1 failed or refused, 2" in done.stdout
    assert cdcsync("reindex").returncode == 2  # FOLLOWER is required
