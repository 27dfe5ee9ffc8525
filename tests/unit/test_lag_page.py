"""The lag page (cdcsync.lagpage) from made-up reports, and the routes metrics.serve answers. Loopback only."""

from __future__ import annotations

import json
import socket
from html.parser import HTMLParser
from typing import Any
from urllib.error import HTTPError
from urllib.request import urlopen

from cdcsync import lagpage, metrics
from cdcsync.connectors.lag import SourceLag
from cdcsync.sync.lag import FollowerLag, PartitionLag, TableLag
from cdcsync.sync.lag_report import LagReport

NOW_MS = 1_700_000_000_000


def report(follower: str = "search") -> LagReport:
    behind = PartitionLag(0, position=100, log_start=0, log_end=350, applied_ms=NOW_MS - 90_000, newest_ms=NOW_MS)
    caught_up = PartitionLag(0, position=40, log_start=0, log_end=40)
    return LagReport(
        at_ms=NOW_MS,
        followers=[
            FollowerLag(
                follower,
                "checkpoint",
                [
                    TableLag("pg", "public.orders", "pg.public.orders", [behind]),
                    TableLag("pg", "public.customers", "pg.public.customers", [caught_up]),
                ],
            )
        ],
        sources=[
            SourceLag(
                "pg",
                "postgres",
                500,
                NOW_MS,
                heartbeat_ms=NOW_MS - 2_000,
                slot="cdcsync_pg",
                retained_wal_bytes=3 * 1024 * 1024,
            ),
            SourceLag("maria", "mariadb", 500, NOW_MS, heartbeat_ms=NOW_MS - 600_000),
        ],  # fmt: skip
    )


class Text(HTMLParser):
    """What a person reads: text outside <style>, <title> and <head>."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self._hidden += tag in ("style", "title", "script")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("style", "title", "script")

    def handle_data(self, data: str) -> None:
        if not self._hidden and data.strip():
            self.parts.append(data.strip())


def text_of(page: str) -> str:
    parser = Text()
    parser.feed(page)
    return " ".join(parser.parts)


def test_build_joins_lag_state_freshness_and_reasons() -> None:
    data = lagpage.build(
        report(),
        states={"search": "running", "cache": "restarting"},
        restarts={"cache": 3},
        applied={("search", "public.customers"): NOW_MS / 1000 - 30},
        healthy=False,
        health_lines=["follower cache restarting (restart 4): ConnectionError: redis down", "capture maria: stalled"],
        now_s=NOW_MS / 1000,
    )
    search, cache = data["followers"]
    assert (search["follower"], search["state"], search["offsets_behind"]) == ("search", "running", 250)
    orders, customers = search["tables"]
    assert (orders["table"], orders["offsets_behind"], orders["seconds_behind"]) == ("public.orders", 250, 90.0)
    assert (customers["state"], customers["last_applied_commit_age_s"]) == ("caught up", 30.0)
    # A follower the supervisor knows but the lag report does not (yet): its state, no tables.
    assert (cache["state"], cache["restarts"], cache["tables"]) == ("restarting", 3, [])
    assert cache["reason"] == "ConnectionError: redis down"
    pg, maria = data["sources"]
    assert (pg["state"], pg["slot_retained_wal_bytes"], pg["problem"]) == ("idle", 3 * 1024 * 1024, "")
    assert (maria["state"], maria["problem"]) == ("stalled", "stalled")
    assert not data["healthy"] and len(data["problems"]) == 2
    json.dumps(data)  # /lag.json serves it as is


def test_page_shows_every_follower_table_and_number_and_refreshes() -> None:
    data = lagpage.build(report(), {"search": "running"}, {}, {}, True, [], NOW_MS / 1000 + 4)
    page = lagpage.render(data)
    text = text_of(page)
    for seen in ("search", "public.orders", "public.customers", "250", "90 s", "3.0 MiB"):
        assert seen in text, (seen, text)
    assert "stalled" in text and "healthy" in text and "lag measured 4.0 s ago" in text
    assert f'http-equiv="refresh" content="{lagpage.REFRESH_S}"' in page
    assert "http://" not in page and "https://" not in page and "<script" not in page  # no external asset


def test_each_table_shows_its_last_background_verify_pass() -> None:
    now = NOW_MS / 1000
    verified = {("search", "pg.public.orders"): (3, now - 120), ("search", "pg.public.customers"): (0, now - 30)}
    data = lagpage.build(report(), {"search": "running"}, {}, {}, True, [], now, verified)
    orders, customers = data["followers"][0]["tables"]
    assert (orders["divergent_rows"], orders["verified_age_s"]) == (3, 120.0)
    assert (customers["divergent_rows"], customers["verified_age_s"]) == (0, 30.0)
    text = text_of(lagpage.render(data))
    assert "3 rows differ, 2 min ago" in text and "same as the source, 30 s ago" in text, text
    unverified = lagpage.build(report(), {"search": "running"}, {}, {}, True, [], now)
    assert unverified["followers"][0]["tables"][0]["divergent_rows"] is None
    assert "not yet" in text_of(lagpage.render(unverified))


def test_names_are_escaped() -> None:
    data = lagpage.build(None, {"x": "stopped"}, {}, {}, False, ["follower x stopped: bad <b>mapping</b>"], 0.0)
    page = lagpage.render(data)
    assert "<b>mapping" not in page and "&lt;b&gt;mapping" in page
    assert "lag not measured yet" in text_of(page)


def test_seconds_and_sizes_read_like_a_person_writes_them() -> None:
    assert [lagpage.seconds(v) for v in (None, 0, 4.25, 90, 600, 7200, 200000)] == [
        "?", "0 s", "4.2 s", "90 s", "10 min", "2.0 h", "2.3 d",
    ]  # fmt: skip
    assert [lagpage.size(v) for v in (None, 512, 2048, 5 * 1024**3)] == ["–", "512 B", "2.0 KiB", "5.0 GiB"]


def test_serve_answers_the_page_its_json_metrics_and_health() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.record_lag(report("pagetest"))
    metrics.FOLLOWER_STATE.labels("pagetest", "running").set(1)
    health = lambda: (False, ["follower other stopped: reindex it"])  # noqa: E731
    server = metrics.serve(port, health=health, pages=lagpage.pages(health))
    base = f"http://127.0.0.1:{port}"
    try:
        for path in ("/", "/lag"):
            with urlopen(base + path, timeout=5) as page:
                assert page.headers["Content-Type"].startswith("text/html")
                text = text_of(page.read().decode())
            assert "pagetest" in text and "public.orders" in text and "reindex it" in text
        with urlopen(base + "/lag.json", timeout=5) as answer:
            data = json.load(answer)
        assert [f["follower"] for f in data["followers"]][0] == "pagetest"
        with urlopen(base + "/metrics", timeout=5) as answer:
            assert b'cdcsync_follower_offsets_behind{follower="pagetest"' in answer.read()
        for path, status in (("/healthz", 503), ("/nothing", 404)):
            try:
                urlopen(base + path, timeout=5)
                raise AssertionError(f"{path} answered 200")
            except HTTPError as err:
                assert err.code == status
    finally:
        server.shutdown()
        server.server_close()
