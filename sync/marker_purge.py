"""The daemon's purge of delete markers that no replay can need any more (docs/followers.md, "Delete markers").

A sink keeps a marker for each delete, holding the delete's version, so that a
write older than the delete, replayed later, cannot bring the row back
(``sync.sink``). Kept forever, they grow an index of a table with many deletes
without end. A marker is needed only while such a write can still arrive: up
to the source's compaction horizon (``compaction_horizon_s``) after it was
written, past which no follower the daemon runs reads that stretch of the log
again (``sync.position``); each sink's purge says why in detail
(``sync.sinks.elasticsearch_markers``).

So the daemon runs a round (``tick``, every ``every_s``: ``PURGE_EVERY_S``, or
a tenth of the shortest horizon of its followers' sources) that asks the sink
of each follower whose kind can purge (``sync.sinks.purges_markers``) to remove
each target's markers older than its source's horizon, and counts them in
``cdcsync_delete_markers_purged_total{follower,table}``. A follower's store
that is down fails that follower's turn alone; the next round tries again.
"""

from __future__ import annotations

import logging
import time
from typing import cast

from cdcsync import metrics
from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import CdcsyncError, RetryableError
from cdcsync.sync.documents.tree import unit
from cdcsync.sync.sink import MarkerPurge as PurgesMarkers  # the role; MarkerPurge below is the pass
from cdcsync.sync.sinks import build_sink, purges_markers

log = logging.getLogger("cdcsync.purge")

PURGE_EVERY_S = 3600.0  # markers live for days (the horizon): an hourly pass keeps an index within an hour of that
MIN_EVERY_S = 10.0


class MarkerPurge:
    """``tick``: one purge pass over every target of each follower whose sink purges markers."""

    def __init__(self, config: Config, followers: list[FollowerConfig]) -> None:
        self.config = config
        self.followers = [f for f in followers if purges_markers(f)]

    @property
    def every_s(self) -> float:
        """How often a pass runs: ``PURGE_EVERY_S``, or a tenth of the shortest horizon of the followed sources."""
        horizons = [s.compaction_horizon_s for f in self.followers for s, _t in self.config.followed_tables(f)]
        return max(MIN_EVERY_S, min([PURGE_EVERY_S, *(h / 10 for h in horizons)]))

    def tick(self, now: float | None = None) -> dict[tuple[str, str], int]:
        """Purge each follower's targets; ``(follower, table) -> markers removed``. ``now``: the pass's time."""
        removed: dict[tuple[str, str], int] = {}
        failed: list[str] = []
        for follower in self.followers:
            try:
                removed.update(self.purge(follower, time.time() if now is None else now))
            except CdcsyncError as err:  # this store's turn fails alone
                failed.append(f"follower {follower.name}: {err}")
        if failed:
            raise RetryableError("; ".join(failed))
        return removed

    def targets(self, follower: FollowerConfig) -> list[tuple[str, str, float]]:
        """Each target of the follower: (its table, or its document as ``documents.<name>``; the target; the
        compaction horizon of its source)."""
        if follower.documents is not None:
            return [
                (unit(name), follower.document_target(name),
                 self.config.document_source(follower, name).compaction_horizon_s)
                for name in follower.documents
            ]  # fmt: skip
        return [
            (str(table), follower.target_for(source.name, table), source.compaction_horizon_s)
            for source, table in self.config.followed_tables(follower)
        ]

    def purge(self, follower: FollowerConfig, now: float) -> dict[tuple[str, str], int]:
        removed: dict[tuple[str, str], int] = {}
        sink = build_sink(self.config, follower, None)
        purger = cast(PurgesMarkers, sink)  # its class declares the role (purges_markers chose the followers)
        try:
            for table, target, horizon_s in self.targets(follower):
                started = time.monotonic()
                done = purger.purge_markers(target, horizon_s, now)
                removed[follower.name, str(table)] = done.purged
                metrics.MARKERS_PURGED.labels(follower.name, str(table)).inc(done.purged)
                if done.purged or done.stamped or done.changed:
                    log.info(
                        "follower=%s table=%s target=%s delete_markers_purged=%d stamped=%d changed_since=%d "
                        "horizon_s=%d took_s=%.1f", follower.name, table, target, done.purged, done.stamped,
                        done.changed, horizon_s, time.monotonic() - started,
                    )  # fmt: skip
        finally:
            sink.close()
        return removed
