"""The daemon's lag page as a person sees it: a real `cdcsync run`, headless Chromium, a screenshot.

Two followers (Elasticsearch and Redis) follow two captured Postgres tables.
Once both have applied everything (``/lag.json`` says 0 offsets behind), the
page at ``/`` is opened in Debian's ``chromium``: its rendered DOM must show
each follower, each table and its numbers, and a 1200x800 screenshot is taken
(kept beside the test's other files in its tmp_path).
"""

from __future__ import annotations

import re
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from cdcsync.connectors.apply import apply
from tests.chaos.daemon import daemon_config, free_port, running_daemon, stop_daemon
from tests.integration.followers import drop_stores, follower_dicts
from tests.support import drop_capture, execute, source_dict, uid, wait_streaming
from tests.tools import required
from tests.unit.test_lag_page import text_of


def chromium() -> str:
    return required("chromium", "chromium")


def browse(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--window-size=1200,800", *args, url],
        capture_output=True,
        timeout=120,
    )  # fmt: skip


def wait_caught_up(port: int, followers: set[str], tables: set[str], log: Path, within_s: float = 300) -> Any:
    """/lag.json once every follower runs and shows every table at 0 offsets behind."""
    deadline = time.monotonic() + within_s
    data: Any = None
    while time.monotonic() < deadline:
        try:
            data = requests.get(f"http://127.0.0.1:{port}/lag.json", timeout=5).json()
        except requests.RequestException:
            data = None
        if data is not None:
            seen = {
                f["follower"]: {t["table"]: t["offsets_behind"] for t in f["tables"]}
                for f in data["followers"]
                if f["state"] == "running"
            }
            if set(seen) == followers and all(seen[f] == dict.fromkeys(tables, 0) for f in followers):
                return data
        time.sleep(2)
    raise AssertionError(f"not caught up within {within_s} s: {data}\n{log.read_text(errors='replace')[-3000:]}")


def test_lag_page_in_headless_chromium(tmp_path: Path) -> None:
    chromium()
    tag = f"t{uid()}"
    tables = [f"lagpage_{uid()}", f"lagpage_{uid()}"]
    for i, table in enumerate(tables):
        rows = ", ".join(f"({n}, {n * i})" for n in range(1, 21))
        execute(
            "postgres",
            f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)",
            f"INSERT INTO {table} VALUES {rows}",
        )
    source = f"{tag}_pg"
    followers = [f for f in follower_dicts(tag, tmp_path) if f["name"] in ("search", "cache")]
    _, config_path, config = daemon_config(tmp_path, [source_dict("postgres", source, [f"public.{t}" for t in tables])],
                                           followers)  # fmt: skip
    port, log = free_port(), tmp_path / "run.log"
    try:
        apply(config)
        wait_streaming(config)
        with running_daemon(config_path, log, port) as daemon:
            wanted = {f"public.{t}" for t in tables}
            wait_caught_up(port, {"search", "cache"}, wanted, log)
            url = f"http://127.0.0.1:{port}/"

            dom = browse(url, tmp_path / "chromium", "--dump-dom")
            assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
            text = text_of(dom.stdout.decode())
            for follower in ("search", "cache"):
                assert re.search(rf"\b{follower} running \d+ restarts? · 0 offsets behind", text), text
            for table in wanted:  # a row per follower: table, source, state, offsets, seconds behind, freshness
                row = rf"{re.escape(table)} {source} caught up 0 0 s (committed [\d.]+ (s|min) ago|–)"
                assert len(re.findall(row, text)) == 2, (row, text)
            assert re.search(
                rf"{source} postgres (idle|capturing) [\d.]+ s [\d.]+ s cdcsync_{source} [\d.]+ \S+", text
            ), text

            shot = tmp_path / "lag-page.png"
            done = browse(url, tmp_path / "chromium", f"--screenshot={shot}")
            assert done.returncode == 0 and shot.exists(), done.stderr.decode(errors="replace")[-2000:]
            png = shot.read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 800)
            assert len(png) > 20_000, "a blank page compresses to a few KiB"
            stop_daemon(daemon, log)
    finally:
        drop_capture(config)
        drop_stores(config, tag)
        for table in tables:
            execute("postgres", f"DROP TABLE IF EXISTS {table}")
