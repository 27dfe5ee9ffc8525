"""`python -m bench` still runs end to end: a small run, its JSON read back.

Not a speed test: nothing here compares a rate with a number. It keeps the
benchmark's own plumbing (capture, warm-up, catch-up, raw ceiling, live phase,
cleanup) working, since `make bench` is not part of `make test`. A minute
long, it runs with the other long tests in `make chaos`, keeping `make test`
within its hour.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from tests.support import ENV

ROWS, LIVE = 3000, 500


@pytest.mark.long
def test_bench_runs_and_its_figures_add_up() -> None:
    es = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
    before = set(es.indices.get(index="bench*", allow_no_indices=True))
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--rows", str(ROWS), "--live", str(LIVE), "--runs", "2"]
        + ["--sinks", "search,cache", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert figures["rows"] == ROWS
    for sink in ("search", "cache"):
        entry = figures[sink]
        # The first follower reads the inserts; the second also reads the first one's live updates.
        assert entry["catch_up_changes"] >= ROWS
        for rate in ("catch_up_changes_per_s", "live_changes_per_s", "live_captured_per_s", "raw_ceiling_docs_per_s"):
            assert entry[rate] > 0, (sink, rate, entry)
        assert entry["catch_up_ratio"] == round(entry["catch_up_changes_per_s"] / entry["raw_ceiling_docs_per_s"], 2)
        assert entry["live_ratio"] == round(entry["live_changes_per_s"] / entry["raw_ceiling_docs_per_s"], 2)
        # Each run is its own follower and store: each applies the whole log, next to its own raw ceiling.
        runs = entry["catch_up_runs"]
        assert len(runs) == 2 and runs[0]["catch_up_changes_per_s"] == entry["catch_up_changes_per_s"], runs
        for run in runs:
            assert run["catch_up_changes"] >= ROWS and run["raw_ceiling_docs_per_s"] > 0, run
            assert run["catch_up_ratio"] == round(run["catch_up_changes_per_s"] / run["raw_ceiling_docs_per_s"], 2)
    # The bench cleans up after itself: no index of its run is left.
    leftovers = set(es.indices.get(index="bench*", allow_no_indices=True)) - before
    assert not leftovers, sorted(leftovers)
