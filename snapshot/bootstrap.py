"""Bootstrap a new follower from the compacted topics, aligned with exact offsets.

1. Capture, first, the end offset E of every partition of the followed topics.
2. Stage a new store (``Sink.stage``): invisible to readers.
3. Read each partition from its start up to E and apply it into the staged
   store through the follower's own batch path (parse, dead letters, last per
   key, versioned writes), in chunks, in offset order (``replay``).
4. Publish the staged generations (``Sink.publish``): readers switch to a complete
   store; before that they saw no store, or the previous one.
5. Only then record E as the follower's start position
   (``<state>/bootstrap/<follower>.json``, written atomically).
6. ``cdcsync run`` starts a follower that has no checkpoint yet from that
   position: every change before E is in the store, every change from E on
   is streamed. No gap; and no double apply, which the versions would make
   harmless anyway.

Killed half-way, nothing was published or recorded; a re-run's ``stage``
drops the unpublished store and starts over. A follower that already has a
checkpoint is refused: it is streaming, and rebuilding it is ``reindex``'s job.

One bootstrap or reindex per follower at a time (``follower_lock``): a second
one would drop the first's unpublished store in its own ``stage``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError
from cdcsync.snapshot.replay import Progress, Summary, capture, offsets_json, publish, replay
from cdcsync.sync import reindex_needed
from cdcsync.sync.follower import Follower
from cdcsync.sync.position import start_file


class Busy(FatalError):
    """Another bootstrap or reindex of the follower holds its lock."""


@contextmanager
def follower_lock(base: Path, follower: str, what: str) -> Iterator[None]:
    """Hold the follower's lock for the block, or refuse (``Busy``, exit 1) while another run holds it.

    An ``flock`` on ``<state>/locks/<follower>.lock``: the OS releases it when
    the holder exits, however it dies, so a killed run never blocks the next
    one and there is nothing to clean up. The file says who holds it, for the
    refusal message. ``what`` names this run (``reindex cache``).
    """
    path = base / "locks" / f"{follower}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 1024, 0).decode(errors="replace").strip() or "a process that just started"
            raise Busy(
                f"follower {follower}: refusing `{what}`: another bootstrap or reindex of it is running ({holder}; "
                f"lock {path}). Wait for it to end or stop that process; a killed one releases the lock by itself"
            ) from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.pwrite(fd, f"pid {os.getpid()}: `{what}` since {started}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def bootstrap_from_topics(
    config: Config,
    follower: FollowerConfig,
    running: Follower,
    checkpoint: Path,
    base: Path,
    progress: Progress | None = None,
) -> Summary:
    if checkpoint.exists() and any(checkpoint.iterdir()):
        raise FatalError(
            f"follower {follower.name} already has a checkpoint at {checkpoint}: it is streaming. "
            "Bootstrap builds a new follower; stop it and remove the checkpoint to rebuild it from scratch"
        )
    summary, started = Summary(follower.name), time.monotonic()
    marks = capture(config, sorted(running.mappings))
    running.fresh()  # no checkpoint: whatever state a killed bootstrap left is not this one's
    running.sink.stage(running.targets())
    replay(config, running, {tp: low for tp, (low, _) in marks.items()}, {tp: high for tp, (_, high) in marks.items()},
           summary, progress)  # fmt: skip
    running.filled()
    publish(running.sink)
    summary.offsets = offsets_json({tp: high for tp, (_low, high) in marks.items()})
    summary.seconds = round(time.monotonic() - started, 2)
    record_start(base, follower.name, summary.offsets, origin="topics")
    reindex_needed.remember(config, follower.name, running.mappings.values())  # the shape the new store holds
    return summary


def record_start(base: Path, follower: str, offsets: dict[str, dict[str, int]], origin: str) -> None:
    """Record where the follower starts streaming, atomically: a half-done bootstrap records nothing.

    Topics bootstrapped earlier (``--table``) keep their recorded offsets.
    """
    path = start_file(base, follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(path.read_text())["offsets"] if path.exists() else {}  # --table: keep the other tables'
    merged.update(offsets)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"follower": follower, "offsets": merged, "from": origin, "recorded_at": time.time()}))
    os.replace(tmp, path)
