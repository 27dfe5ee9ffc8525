"""The Redis sink's generations: a staged key space ``P~G`` beside the live one, and its publish key by key.

Readers' key layout (``sinks/redis.py``'s docstring: ``P`` is the sink's
``prefix``, ``T`` a target) is a contract, so a generation cannot be a new key
prefix that readers switch to, nor a spare logical database switched with
``SWAPDB``: that swaps every key of the database, other followers' and other
applications' prefixes included (docs/reindex.md). ``stage`` deletes every
``P~*`` key (an earlier stage never published), opens a **journal**
``P~written:T`` per staged target (a set), then this instance writes and reads
``P~G:T:<id>`` and ``P~G:_deleted:T`` (``G`` from the clock), which no reader
looks at. While a journal exists, the apply script of every writer (the
running follower) adds each id it applies to it, in the same atomic call as
the write. Everything the follower wrote before the journal existed came from
offsets the staged generation is built past, so for an id not in the journal
the staged state is the newer one, whatever the versions say. ``publish`` then
makes each live target the staged generation plus the follower's writes since
the stage, in two passes of script calls of many keys each. Rows are found by
the server itself: each call SCANs on from the previous call's cursor
(``PUBLISH_SCAN_COUNT`` keys) and treats what it found, so no key goes to the
client and back (the promote pass took 1.6-2x as long when the client scanned
the keys and sent them back; ``python -m bench.redis_publish``).
Markers are read with HSCAN and sent back, pipelined in chunks:

1. **purge**: a live row or live marker whose id has neither a staged row
   nor a staged marker and is not in the journal is removed: an orphan (its
   delete was compacted away and the old store missed it) or a stale marker;
2. **promote**: each staged row is RENAMEd over the live key and each staged
   marker replaces the live row and marker, unless the id is in the journal
   with a newer live version (a tie goes to the staged state, which carries
   the reindex's mapping). So markers are reset to the staged generation's,
   and a mapping change reaches every row; then the journals go.

What readers observe: each key switches atomically (a RENAME replaces it in
one step, never absent in between), but not all keys at one instant; during
publish some rows are already the rebuilt ones and others not yet. A row the
source holds is never missing: the staged generation has it (it existed up
to where the generation is built), or the follower wrote it since the stage
(journal). A writer still running an apply script without the journal (a
follower not restarted after an upgrade) is not seen: a key it wrote during
the reindex can show its rebuilt state until the reindex's final catch-up.

``next_generation`` is a stage's part on the server, ``Publish`` a publish; the
sink keeps which targets are staged where (``Generations``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from redis.exceptions import RedisError

from cdcsync.errors import Errors
from cdcsync.sync.sink import Generations, batched
from cdcsync.sync.sinks.redis_apply import ROWS_PER_CALL
from cdcsync.sync.sinks.redis_reads import PIPELINE_COMMANDS, SCAN_COUNT, glob_escape
from cdcsync.sync.sinks.redis_scripts import PUBLISH_SHA, PURGE_SHA

PUBLISH_SCAN_COUNT = "1000"  # keys a publish call scans and moves on the server (docs/performance.md)
# The member a stage puts in each journal so that it exists (an empty set does not). A doc id equal to it
# would only be taken as written by the follower: the version rule instead of a plain replace at publish.
JOURNAL_OPEN = ""

# One script call per (KEYS, ARGV), pipelined: each call's reply or error, in order (``RedisSink._evalsha_all``).
Calls = Callable[[str, Sequence[tuple[list[str], Sequence[str | bytes]]]], list[Any]]


class Layout(Protocol):
    """The sink's key layout (``RedisSink``): a target's keys in ``generation``, or where it writes now (None)."""

    def row_key(self, target: str, doc_id: str, generation: str | None = None) -> str: ...

    def marker_key(self, target: str, generation: str | None = None) -> str: ...

    def journal_key(self, target: str, generation: str | None = None) -> str: ...


def next_generation(client: redis.Redis, prefix: str, targets: Sequence[str], layout: Layout, errors: Errors) -> str:
    """Drop what an unpublished stage left and open each target's journal; the new generation's key space."""
    with errors("dropping an unpublished stage"):
        journals = client.scan_iter(match=glob_escape(f"{prefix}~") + "*", count=SCAN_COUNT)
        for found in batched(journals, PIPELINE_COMMANDS):
            client.unlink(*found)
        for target in targets:  # from now on the running follower notes every id it writes
            client.sadd(layout.journal_key(target, prefix), JOURNAL_OPEN)
    return f"{prefix}~{time.time_ns():x}"


@dataclass
class Publish:
    """A publish of a sink's staged generations (module docstring), by ``run``; the sink then has none staged."""

    client: redis.Redis
    prefix: str  # the live key space
    generations: Generations
    layout: Layout
    calls: Calls
    errors: Errors

    def run(self) -> None:
        """Make the live keys the staged generation plus the follower's writes since the stage (module docstring)."""
        live = self.prefix
        with self.errors("publish"):  # a killed or failed publish is finished by the next reindex (docs/reindex.md)
            for target, staged in self.generations.items():
                # Pass 1: live rows and markers the staged generation does not know and the follower did not write.
                self.scan(PURGE_SHA, target, live, staged)
                markers = self.layout.marker_key(target, live)
                for ids in batched(self.marker_ids(markers), PIPELINE_COMMANDS):
                    self.by_id(PURGE_SHA, target, "marker", [(markers, i) for i in ids])
                # Pass 2: every staged row and marker replaces the live key.
                self.scan(PUBLISH_SHA, target, staged, live)
                markers = self.layout.marker_key(target, staged)
                for ids in batched(self.marker_ids(markers), PIPELINE_COMMANDS):
                    self.by_id(PUBLISH_SHA, target, "marker", [(markers, i) for i in ids])
            for target in self.generations:
                self.client.unlink(self.layout.journal_key(target, live))

    def staged(self, target: str) -> str:
        """The staged generation of ``target`` (``RedisSink._generation_of``)."""
        return self.generations.where(target, self.prefix)

    def shared_key(self, sha: str, target: str) -> str:
        """KEYS[1] of a publish call: the staged marker hash for the purge, the live one for the publish script."""
        return self.layout.marker_key(target, self.staged(target) if sha == PURGE_SHA else self.prefix)

    def scan(self, sha: str, target: str, scanned: str, other: str) -> None:
        """Run the purge or publish script over ``target``'s row keys in generation ``scanned``, found by the server.

        Each call scans PUBLISH_SCAN_COUNT keys on from the cursor the previous one answered (PUBLISH_IDS).
        """
        keys = [self.shared_key(sha, target), self.layout.journal_key(target, self.prefix)]
        head, cursor = self.layout.row_key(target, "", scanned), "0"
        argv = [
            "scan",
            cursor,
            glob_escape(head) + "*",
            head,
            self.layout.row_key(target, "", other),
            PUBLISH_SCAN_COUNT,
        ]
        while True:
            argv[1] = cursor
            (reply,) = self.calls(sha, [(keys, argv)])
            if isinstance(reply, RedisError):
                with self.errors("publish"):
                    raise reply
            cursor = reply[0]
            if cursor == "0":
                return

    def by_id(self, sha: str, target: str, kind: str, found: list[tuple[str, str]]) -> None:
        """Run the purge or publish script on (key, id) pairs, ROWS_PER_CALL a call (KEYS: the scripts' comments)."""
        shared = [self.shared_key(sha, target), self.layout.journal_key(target, self.prefix)]
        other = self.staged(target) if sha == PURGE_SHA else self.prefix  # the other generation's row keys
        calls = []
        for start in range(0, len(found), ROWS_PER_CALL):
            part = found[start : start + ROWS_PER_CALL]
            keys = [*shared, *(k for key, i in part for k in (key, self.layout.row_key(target, i, other)))]
            calls.append((keys, [kind, *(i for _, i in part)]))
        for reply in self.calls(sha, calls):
            if isinstance(reply, RedisError):
                with self.errors("publish"):
                    raise reply

    def marker_ids(self, markers: str) -> Iterator[str]:
        return (ident for ident, _ in self.client.hscan_iter(markers, count=SCAN_COUNT))
