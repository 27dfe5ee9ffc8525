"""What the daemon reports about a bench phase: its ``/metrics`` and Spark's progress lines in its log.

``scrape`` reads every sample of ``/metrics``; the differences between two
scrapes give a phase's latency histogram (``histogram_delta``, read as
Prometheus' ``histogram_quantile`` does by ``bucket_quantile``) and its
applied changes (``counter_delta``). ``batch_phases`` reads the JSON progress
Spark logs per micro-batch when ``CDCSYNC_SPARK_PROGRESS_LOG_LEVEL=INFO``.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the daemon's ``/metrics``, keyed by (name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def histogram_delta(before: dict[Any, float], after: dict[Any, float], follower: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of the phase's latency observations for ``follower``."""
    out = []
    for (name, labels), value in after.items():
        tags = dict(labels)
        if name == "cdcsync_apply_latency_seconds_bucket" and tags.get("follower") == follower:
            out.append((float(tags["le"]), value - before.get((name, labels), 0.0)))
    return sorted(out)


def counter_delta(before: dict[Any, float], after: dict[Any, float], follower: str) -> float:
    return sum(
        value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == "cdcsync_changes_applied_total" and dict(labels).get("follower") == follower
    )


def bucket_quantile(buckets: list[tuple[float, float]], q: str) -> float | None:
    """``histogram_quantile``: linear within the bucket that holds the quantile."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank, lower, below = total * int(q[1:]) / 100, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return round(lower + (upper - lower) * (rank - below) / max(count - below, 1e-9), 2)
        lower, below = upper, count
    return None


def within(buckets: list[tuple[float, float]], bound: float) -> float | None:
    total = buckets[-1][1] if buckets else 0
    return round(dict(buckets)[bound] / total, 3) if total else None


PROGRESS = "Streaming query made progress: "
PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def batch_phases(log: Path, since: float, until: float) -> dict[str, dict[str, Any]]:
    """Per follower, the median ms of each Spark phase of the batches that started in [since, until) and read rows.

    ``every_s`` is the median time from one such batch's start to the next
    (the trigger interval, or the batch's own length when that is longer).
    """
    from datetime import datetime

    decoder, text = json.JSONDecoder(), log.read_text(errors="replace")
    found: dict[str, list[dict[str, Any]]] = {}
    at = text.find(PROGRESS)
    while at >= 0:
        try:
            progress, end = decoder.raw_decode(text, at + len(PROGRESS))
        except ValueError:
            end = at + len(PROGRESS)
        else:
            started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
            if since <= started < until and progress.get("numInputRows"):
                name = str(progress.get("name") or "").removeprefix("cdcsync-")
                found.setdefault(name, []).append(progress | {"started": started})
        at = text.find(PROGRESS, end)
    out: dict[str, dict[str, Any]] = {}
    for name, batches in sorted(found.items()):
        starts = sorted(b["started"] for b in batches)
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        out[name] = {
            "batches": len(batches),
            "rows_p50": _median([b["numInputRows"] for b in batches]),
            "every_s": round(_median(gaps), 2) if gaps else None,
        } | {phase: _median([b["durationMs"].get(phase, 0) for b in batches]) for phase in PHASES}
    return out


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]
