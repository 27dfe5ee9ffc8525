"""The Redis sink's write path: rows as calls of the apply script, and what each call's answer says of its rows.

A row is a JSON array for the apply script (``encode``; its contract is in ``redis_scripts``), its document in
stored form (``stored_form``); a row that has none (a column named ``_v``, text with no UTF-8 form, a negative
version) is rejected before the server. Rows of one target go in one ``Call`` until ``ROWS_PER_CALL`` rows or
``BYTES_PER_CALL`` bytes of JSON, and ``CALLS_PER_ROUND`` calls are pipelined in one round trip (the sink's
``write``). A call answers a byte per row and the refused rows' errors (``outcomes``), taken as
``redis_errors.classify`` says (the table in ``sinks/redis.py``'s docstring).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.exceptions import RedisError

from cdcsync.errors import Errors, FatalError, TableError
from cdcsync.sync.mapping import Row, scalar_text
from cdcsync.sync.sink import WriteResult
from cdcsync.sync.sinks.redis_errors import classify
from cdcsync.sync.sinks.redis_reads import VERSION_FIELD

# One apply script call runs many rows (per-call costs, in redis-py and in the server, are what a
# call per row paid for), bounded because a script blocks every other client of the server while it
# runs: ROWS_PER_CALL rows or BYTES_PER_CALL bytes of JSON, whichever comes first.
ROWS_PER_CALL = 100
BYTES_PER_CALL = 64 * 1024
CALLS_PER_ROUND = 10  # script calls per pipeline round trip: ~1000 rows, as PIPELINE_COMMANDS bounds other rounds


@dataclass
class Call:
    """One apply script call: a target's marker hash and journal, and its rows, each with its key and JSON array."""

    marker: str
    journal: str
    rows: list[tuple[Row, str, bytes]] = field(default_factory=list)
    size: int = 0  # bytes of JSON so far

    def full(self, more: int) -> bool:
        """Whether ``more`` bytes of JSON would pass a bound (a call of one row never is)."""
        return bool(self.rows) and (len(self.rows) >= ROWS_PER_CALL or self.size + more > BYTES_PER_CALL)

    def add(self, row: Row, key: str, encoded: bytes) -> None:
        self.rows.append((row, key, encoded))
        self.size += len(encoded)

    def args(self) -> tuple[list[str], list[str | bytes]]:
        """KEYS and ARGV of the call."""
        keys = [self.marker, self.journal, *(key for _, key, _ in self.rows)]
        return keys, [b"[" + b",".join(encoded for _, _, encoded in self.rows) + b"]"]

    def split(self) -> list[Call]:
        return [Call(self.marker, self.journal, [part], len(part[2])) for part in self.rows]


def encode(row: Row) -> bytes:
    """The row's JSON array for the apply script (its layout: the comment above ``redis_scripts.APPLY``)."""
    if row.version < 0:  # the script compares canonical non-negative decimal strings
        raise ValueError(f"version {row.version} is negative")
    head = [row.doc_id, str(row.version)]
    if row.doc is None:
        return orjson.dumps([*head, "d"])
    fields = stored_form(row.doc)
    if VERSION_FIELD in fields:
        raise ValueError(f"column {VERSION_FIELD!r} collides with the version field of the Redis sink")
    try:
        return orjson.dumps([*head, "u", fields])
    except orjson.JSONEncodeError as err:  # a lone surrogate: no UTF-8 form to store
        raise ValueError(f"a field or value is not valid unicode: {err}") from None


def outcomes(call: Call, reply: Any, url: str, errors: Errors) -> WriteResult:
    """Count one call's answer (a byte per row, then the refused rows' errors); any other answer stops the batch."""
    if isinstance(reply, RedisError):
        if refused_keys(reply):  # the user's ACL leaves out this target's keys: its table is held (sync.held)
            row, key, _ = call.rows[0]
            rows = key[: len(key) - len(row.doc_id)] + "*"
            raise TableError(
                row.target,
                f"redis {url} refused the keys of target {row.target}: {reply}",
                f"grant the sink's Redis user the keys {rows}, {call.marker} and {call.journal} "
                f"(ACL SETUSER <user> ~{rows} ~{call.marker} ~{call.journal})",
            )
        if classify(reply) != "script":
            with errors("write"):
                raise reply
        return WriteResult(rejected=[(row, str(reply)) for row, _, _ in call.rows])  # a call of one row
    statuses = reply[0] if isinstance(reply, list) and reply else None
    if (
        not isinstance(statuses, str)
        or len(statuses) != len(call.rows)
        or len(reply) != 1 + statuses.count("e")
        or statuses.count("1") + statuses.count("0") + statuses.count("e") != len(statuses)
    ):
        raise FatalError(f"redis {url}: the apply script answered {len(call.rows)} rows with {reply!r:.200}")
    result = WriteResult(applied=statuses.count("1"), older=statuses.count("0"))
    if len(reply) > 1:
        refusals = iter(reply[1:])
        for (row, _, _), status in zip(call.rows, statuses, strict=True):
            if status != "e":
                continue
            error = next(refusals)
            if not isinstance(error, RedisError):
                raise FatalError(f"redis {url}: the apply script answered {error!r:.200} for a refused row")
            if classify(error) != "reject":
                with errors("write"):
                    raise error
            result.rejected.append((row, str(error)))
    return result


def refused_keys(err: RedisError) -> bool:
    """Whether ``err`` is an ACL refusing the call's keys (not a command): one target's, where calls are."""
    text = str(err)
    return "no permissions to access one of the keys" in text or "can't access at least one of the keys" in text


def stored_form(doc: dict[str, Any]) -> dict[str, Any]:
    """The canonical document as the row hash stores it: strings only, ``None`` fields left out."""
    return {field: _text(value) for field, value in doc.items() if value is not None}


def _text(value: Any) -> str:
    if type(value) is str:  # most columns: the fast path
        return value
    if type(value) is int:
        return str(value)
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    text = scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_text)  # _text: arrays of decimals
    return str(value)
