"""Redis sink: one hash per row, written by a server-side compare-on-version script.

Layout (``P`` is the sink's ``prefix``, ``T`` a target):

- ``P:T:<doc_id>``: a hash of the document's fields in stored form (every
  value a string; ``None`` omits the field) plus ``_v``, the row's version;
- ``P:_deleted:T``: one hash per target of delete markers, doc id -> version.

Guarantees (``cdcsync.sync.sink``):

- **Apply rule**, atomically per key inside one Lua script: the held version
  is the larger of the row's ``_v`` and its delete marker; a change whose
  version is not higher is a no-op counted as ``stale``. An upsert replaces
  the whole hash (DEL then HSET, so dropped columns do not linger) and clears
  the marker; a delete removes the row and records the marker. Versions are
  compared as decimal strings, never as Lua numbers (doubles lose precision
  above 2^53, and versions use 63 bits).
- **Deletes remove the row** and leave a marker, so a replayed older write
  cannot resurrect it, and a delete of a row the sink never saw still wins
  over the older snapshot of it arriving later. Trade-off: markers are kept
  until purged, one hash field (id + version, some tens of bytes) per deleted
  row, and nothing purges them yet. Purging safely needs the same atomic
  compare per field (a marker can be replaced by a newer delete between a read
  and an HDEL), i.e. a second script; it is left out until memory asks for it.
- **Rejected rows**: a row Redis refuses (the key holds another type, a column
  named ``_v``) is returned in ``rejected`` with the reason; the rest is written.
- **Retryable**: connection errors, timeouts, LOADING, BUSY (a script running
  too long), OOM, READONLY/MASTERDOWN (failover). Rows already written stay
  written; replaying the whole batch is idempotent.

Assumes one Redis server or a primary with replicas, not Redis Cluster: a
row's key and its target's marker hash are in different slots. Target names
may not contain ``:`` (the key layout could not tell ``a`` from ``a:b``) nor
be ``_deleted``.

Values are encoded from their Python type, not the column's type, so
``stored_form`` needs no mapping: ``Decimal`` -> exact digits, temporal ->
ISO 8601 (datetimes in UTC), ``bytes`` -> base64, ``bool`` -> ``true``/
``false``, dict/list (JSON) -> compact ``json.dumps(sort_keys=True)``, other
scalars -> ``str``. A JSON column holding a bare string is therefore stored as
that string.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cdcsync.errors import FatalError, RetryableError
from cdcsync.sync.mapping import TableMapping, scalar_text
from cdcsync.sync.sink import Row, WriteResult, redact_url

VERSION_FIELD = "_v"
CHUNK = 1000  # commands per pipeline round trip: bounds client and server buffers on huge batches
SCAN_COUNT = 1000
# Error codes that pass on their own and that redis-py leaves at the start of the message.
TRANSIENT = ("BUSY", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS")

# KEYS: row key, marker hash. ARGV: doc id, version, op ('u' | 'd'), then field, value, ...
# Returns 1 when applied, 0 when the store holds this version or a newer one.
APPLY = """
local function newer(a, b)
  -- canonical non-negative decimal strings: the longer is larger; else the first differing
  -- byte decides (byte by byte, because Lua's string '<' follows the server's collation locale)
  if #a ~= #b then return #a > #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return false
end
local version = ARGV[2]
local row = redis.call('HGET', KEYS[1], '_v')
if row and not newer(version, row) then return 0 end
local marker = redis.call('HGET', KEYS[2], ARGV[1])
if marker and not newer(version, marker) then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[3] == 'd' then
  redis.call('HSET', KEYS[2], ARGV[1], version)
else
  redis.call('HSET', KEYS[1], '_v', version, unpack(ARGV, 4))
  if marker then redis.call('HDEL', KEYS[2], ARGV[1]) end
end
return 1
"""
APPLY_SHA = hashlib.sha1(APPLY.encode()).hexdigest()


class RedisSink:
    """Applies rows to ``<prefix>:<target>:<doc_id>`` hashes; see the module docstring."""

    def __init__(self, name: str, url: str, prefix: str = "cdc") -> None:
        self.name = name
        self.url = redact_url(url)
        self.prefix = prefix
        self._client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=30, socket_connect_timeout=10)

    def open(self, mappings: Sequence[TableMapping]) -> None:
        """Check the target names and load the apply script (nothing else to create)."""
        for mapping in mappings:
            self._check_target(mapping.target)
        self._load_script()

    def row_key(self, target: str, doc_id: str) -> str:
        return f"{self.prefix}:{target}:{doc_id}"

    def marker_key(self, target: str) -> str:
        return f"{self.prefix}:_deleted:{target}"

    # ------------------------------------------------------------------ write

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        """Run the apply script once per row, pipelined in rounds of CHUNK rows."""
        result = WriteResult()
        pending: list[tuple[Row, list[str]]] = []
        for row in rows:
            self._check_target(row.target)
            try:
                pending.append((row, self._script_args(row)))
            except ValueError as err:
                result.rejected.append((row, str(err)))
        for start in range(0, len(pending), CHUNK):
            result = result.merge(self._apply(pending[start : start + CHUNK]))
        return result  # the follower logs the batch's counts

    def _script_args(self, row: Row) -> list[str]:
        if row.version < 0:  # the script compares canonical non-negative decimal strings
            raise ValueError(f"version {row.version} is negative")
        keys = [self.row_key(row.target, row.doc_id), self.marker_key(row.target)]
        if row.doc is None:
            return [*keys, row.doc_id, str(row.version), "d"]
        fields = self.stored_form(row.doc)
        if VERSION_FIELD in fields:
            raise ValueError(f"column {VERSION_FIELD!r} collides with the version field of the Redis sink")
        return [*keys, row.doc_id, str(row.version), "u", *(part for item in fields.items() for part in item)]

    def _apply(self, pending: list[tuple[Row, list[str]]]) -> WriteResult:
        result = WriteResult()
        for _attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for _row, args in pending:
                pipe.evalsha(APPLY_SHA, 2, *args)
            try:
                replies = pipe.execute(raise_on_error=False)
            except RedisError as err:
                raise self._mapped(err, "write") from None
            again = []
            for (row, args), reply in zip(pending, replies, strict=True):
                if isinstance(reply, NoScriptError):  # restart or SCRIPT FLUSH: this row did not run
                    again.append((row, args))
                elif isinstance(reply, RedisError):
                    if _kind(reply) != "reject":
                        raise self._mapped(reply, "write")
                    result.rejected.append((row, str(reply)))
                elif reply == 1:
                    result.applied += 1
                else:
                    result.stale += 1
            if not again:
                return result
            self._load_script()
            pending = again
        raise RetryableError(f"redis {self.url}: the apply script vanished twice in one batch (SCRIPT FLUSH?)")

    def _load_script(self) -> None:
        try:
            sha = self._client.script_load(APPLY)
        except RedisError as err:
            raise self._mapped(err, "SCRIPT LOAD (Lua scripting must be allowed)") from None
        if sha != APPLY_SHA:
            raise FatalError(f"redis {self.url} hashed the apply script as {sha}, expected {APPLY_SHA}")

    def _mapped(self, err: RedisError, what: str) -> Exception:
        """A Redis failure mapped onto the two error roots (a per-row reply outside ``write`` is fatal too)."""
        if _kind(err) == "retry":
            return RetryableError(f"redis {self.url} unavailable for {what}: {err}", retry_after=2.0)
        return FatalError(f"redis {self.url} refused {what}: {type(err).__name__}: {err}")

    def _check_target(self, target: str) -> None:
        if not target or ":" in target or target == "_deleted":
            raise FatalError(f"redis sink {self.name}: target {target!r} must be non-empty, without ':', not _deleted")

    # ------------------------------------------------------------------ read

    def held(self, target: str) -> dict[str, tuple[int, dict[str, Any]]]:
        """Every row hash of the target: ``{doc_id: (version, fields without _v)}``."""
        self._check_target(target)
        head = f"{self.prefix}:{target}:"
        held: dict[str, tuple[int, dict[str, Any]]] = {}
        try:
            keys = list(self._client.scan_iter(match=_glob_escape(head) + "*", count=SCAN_COUNT))
            for start in range(0, len(keys), SCAN_COUNT):
                pipe = self._client.pipeline(transaction=False)
                for key in keys[start : start + SCAN_COUNT]:
                    pipe.hgetall(key)
                replies = pipe.execute(raise_on_error=False)
                for key, fields in zip(keys[start : start + SCAN_COUNT], replies, strict=True):
                    if isinstance(fields, RedisError) and _kind(fields) != "reject":
                        raise fields
                    # Skipped: a key of another type (WRONGTYPE), one gone since the scan (empty), one without _v.
                    if isinstance(fields, dict) and VERSION_FIELD in fields:
                        version = int(fields.pop(VERSION_FIELD))
                        held[key[len(head) :]] = (version, fields)
        except RedisError as err:
            raise self._mapped(err, "scan") from None
        return held

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The canonical document as the row hash stores it: strings only, ``None`` fields left out."""
        return {field: _text(value) for field, value in doc.items() if value is not None}

    def close(self) -> None:
        self._client.close()


def _kind(err: RedisError) -> str:
    """'fatal', 'retry' or 'reject' (a reply about this row only)."""
    if isinstance(err, AuthenticationError | NoPermissionError):
        return "fatal"
    # redis-py strips the codes it maps to a class (OOM, READONLY, LOADING); other codes stay in the text.
    if isinstance(err, RedisConnectionError | RedisTimeoutError | OutOfMemoryError | ReadOnlyError):
        return "retry"
    return "retry" if str(err).split(" ", 1)[0] in TRANSIENT else "reject"


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(value: Any) -> str:
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    text = scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_text)  # _text: arrays of decimals
    return str(value)
