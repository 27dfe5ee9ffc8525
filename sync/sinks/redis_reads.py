"""The Redis sink's reads: every row hash of a target (``scan``), and those of some ids (``lookup``).

What ``verify`` and ``repair`` compare with the source. A target's rows in a key space are the hashes
``<space>:<target>:<doc_id>`` (the layout is in ``sinks/redis.py``'s docstring), each read as
``(doc_id, version, fields without _v)``. Keys are found with SCAN, ``SCAN_COUNT`` keys a round trip, matching a
pattern whose literal part is escaped (``glob_escape``); hashes are read ``PIPELINE_COMMANDS`` to a pipeline round
trip. A publish walks a target's keys the same way (``redis_generations``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import redis
from redis.exceptions import RedisError

from cdcsync.errors import Errors
from cdcsync.sync.sink import batched
from cdcsync.sync.sinks.redis_errors import classify

VERSION_FIELD = "_v"
PIPELINE_COMMANDS = 1000  # commands per pipeline round trip: bounds client and server buffers on huge batches
SCAN_COUNT = 1000


def scan(client: redis.Redis, head: str, errors: Errors) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Every row hash whose key starts with ``head``, ``SCAN_COUNT`` keys a round trip.

    SCAN may return a key twice (the keyspace rehashed meanwhile): a reader keeps the last.
    """
    with errors("scan"):
        keys = client.scan_iter(match=glob_escape(head) + "*", count=SCAN_COUNT)
        for chunk in batched(keys, PIPELINE_COMMANDS):
            yield from _rows(client, head, chunk)


def lookup(
    client: redis.Redis, head: str, ids: Iterable[str], errors: Errors
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """The row hashes ``head + id`` of these ids that exist, a pipeline of hash reads at a time."""
    with errors("lookup"):
        for chunk in batched(ids, PIPELINE_COMMANDS):
            yield from _rows(client, head, [head + ident for ident in chunk])


def _rows(client: redis.Redis, head: str, keys: list[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """The row hashes of ``keys`` (one pipeline): ``(doc_id, version, fields without _v)``."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    replies = pipe.execute(raise_on_error=False)
    for key, fields in zip(keys, replies, strict=True):
        if isinstance(fields, RedisError) and classify(fields) != "reject":
            raise fields
        # Skipped: a key of another type (WRONGTYPE), one gone since the scan (empty), one without _v.
        if isinstance(fields, dict) and VERSION_FIELD in fields:
            version = int(fields.pop(VERSION_FIELD))
            yield key[len(head) :], version, fields


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
