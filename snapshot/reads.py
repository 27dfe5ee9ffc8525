"""Where a consistent read of a source stands in its change log (``bootstrap --from source``).

Each kind reads its own way (``cdcsync.sources.snapshot`` says what a read
gives; ``sources.postgres.snapshot`` and ``sources.mariadb.snapshot`` how):
``open_read`` starts one, ``wait_passed`` waits until the source's connector
has passed it, so that the end offsets captured after split the log exactly.
"""

from __future__ import annotations

import time

import orjson

from cdcsync.config import SourceConfig
from cdcsync.connectors.client import ConnectClient
from cdcsync.errors import FatalError
from cdcsync.sources import kind_of
from cdcsync.sources.snapshot import SnapshotRead


def open_read(source: SourceConfig) -> SnapshotRead:
    return kind_of(source).reads.snapshot(source).open()


def wait_passed(read: SnapshotRead, connect: ConnectClient, timeout_s: float = 300, poll_s: float = 0.5) -> float:
    """Block until the connector's committed offset is past the read; return the seconds waited.

    Kafka Connect commits a source offset only once every record before it is
    acknowledged by Kafka, so from then on the reflected changes are all in
    their topics. How soon depends on the worker's ``offset.flush.interval.ms``.
    """
    read.mark()
    name, started = read.source.name, time.monotonic()
    while True:
        offsets = connect.offsets(name)
        if any(read.passed(o.get("offset") or {}) for o in offsets):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise FatalError(
                f"connector {name} has not passed the snapshot's position within {timeout_s:.0f}s "
                f"(committed offsets: {orjson.dumps(offsets).decode()[:300]}); is it running? "
                "(cdcsync connectors status)"
            )
        time.sleep(poll_s)
