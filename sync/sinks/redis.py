"""Redis sink: one hash per row, written by a server-side compare-on-version script.

Layout (``P`` is the sink's ``prefix``, ``T`` a target):

- ``P:T:<doc_id>``: a hash of the document's fields in stored form (every
  value a string; ``None`` omits the field) plus ``_v``, the row's version;
- ``P:_deleted:T``: one hash per target of delete markers, doc id -> version.

Guarantees (``cdcsync.sync.sink``):

- **Apply rule**, atomically per key inside a Lua script: the held version
  is the larger of the row's ``_v`` and its delete marker; a change whose
  version is not higher is a no-op counted as ``older``. An upsert replaces
  the whole hash (DEL then HSET, so dropped columns do not linger) and clears
  the marker; a delete removes the row and records the marker. Versions are
  compared as decimal strings, never as Lua numbers (doubles lose precision
  above 2^53, and versions use 63 bits). One script call applies many rows of
  one target in order, naming the target's marker hash and journal once, and
  answers with one string of a byte per row (plus the refused rows' errors):
  a call per row spent most of its time on per-call costs, and a reply per row
  on the client's parsing. Calls are bounded (``ROWS_PER_CALL``,
  ``BYTES_PER_CALL``) because a running script makes every other client of the
  server wait.
- **Deletes remove the row** and leave a marker, so a replayed older write
  cannot resurrect it, and a delete of a row the sink never saw still wins
  over the older snapshot of it arriving later. Trade-off: markers are kept,
  one hash field (id + version, some tens of bytes) per deleted row, until a
  reindex replaces them with the staged generation's.
- **Errors** (``redis_errors.classify``; the sink contract's rule: only an error about
  that one row rejects it, every other one stops the batch). A rejected row
  writes nothing: the script runs each command with ``redis.pcall`` and
  returns its error as that row's answer, and a row's reads come before its
  writes. The other rows of its call are written. An answer the sink cannot
  map raises ``FatalError``; it never counts as applied.

  =================  ==========================================================
  answer             taken as
  =================  ==========================================================
  ``WRONGTYPE``      **rejected**: the row's key, or its target's marker hash,
                     holds another type
  before the server  **rejected**: a column named ``_v``, text with no UTF-8
                     form, a negative version
  script error       a Lua error of the apply script (cjson cannot decode a
                     row): the call's rows run one per call, and a row that
                     still fails alone is **rejected**
  transient          ``RetryableError``: connection errors, timeouts, ``BUSY``,
                     ``LOADING``, ``OOM``, ``READONLY``, ``MASTERDOWN``,
                     ``MISCONF``, ``NOREPLICAS``, ``CLUSTERDOWN``,
                     ``TRYAGAIN``, SCRIPT KILL. The follower retries the whole
                     batch (idempotent: rows written stay written), then stops
                     with ``FatalError``
  needs a person     ``FatalError``: ``NOAUTH``, ``WRONGPASS``, ``NOPERM`` and
                     an ACL refusal inside the script (the message lists what
                     to grant); ``MOVED``, ``ASK``, ``CROSSSLOT`` (Redis
                     Cluster is not supported); ``ERR unknown command``
  anything else      ``RetryableError`` ("unclassified"), then ``FatalError``:
                     never rejected
  =================  ==========================================================

Generations (``stage``/``publish``). Readers' key layout above is a
contract, so a generation cannot be a new key prefix that readers switch to,
nor a spare logical database switched with ``SWAPDB``: that swaps every key of
the database, other followers' and other applications' prefixes included
(docs/reindex.md). ``stage`` deletes every ``P~*`` key (an earlier stage never
published), opens a **journal** ``P~written:T`` per staged target (a set), then
this instance writes and reads ``P~G:T:<id>`` and ``P~G:_deleted:T`` (``G``
from the clock), which no reader looks at. While a journal exists, the apply
script of every writer (the running follower) adds each id it applies to it,
in the same atomic call as the write. Everything the follower wrote before
the journal existed came from offsets the staged generation is built past,
so for an id not in the journal the staged state is the newer one, whatever
the versions say. ``publish`` then makes each live target the staged
generation plus the follower's writes since the stage, in two passes of script
calls of many keys each. Rows are found by the server itself: each call SCANs
on from the previous call's cursor (``PUBLISH_SCAN_COUNT`` keys) and treats
what it found, so no key goes to the client and back (the promote pass took
1.6-2x as long when the client scanned the keys and sent them back;
``python -m bench.redis_publish``).
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

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis
from redis.exceptions import NoScriptError, RedisError

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError, RetryableError, mapped
from cdcsync.sync.mapping import Row, TableMapping, scalar_text
from cdcsync.sync.sink import Generations, WriteResult, batched, redact_url
from cdcsync.sync.sinks import secret
from cdcsync.sync.sinks.redis_errors import classify, root
from cdcsync.sync.sinks.redis_scripts import APPLY_SHA, PROMOTE_SHA, PURGE_SHA, SCRIPTS

log = logging.getLogger(__name__)

VERSION_FIELD = "_v"
PIPELINE_COMMANDS = 1000  # commands per pipeline round trip: bounds client and server buffers on huge batches
# One apply script call runs many rows (per-call costs, in redis-py and in the server, are what a
# call per row paid for), bounded because a script blocks every other client of the server while it
# runs: ROWS_PER_CALL rows or BYTES_PER_CALL bytes of JSON, whichever comes first.
ROWS_PER_CALL = 100
BYTES_PER_CALL = 64 * 1024
CALLS_PER_ROUND = 10  # script calls per pipeline round trip: ~1000 rows, as PIPELINE_COMMANDS bounds other rounds
SCAN_COUNT = 1000
PUBLISH_SCAN_COUNT = "1000"  # keys a publish call scans and moves on the server (docs/performance.md)
# The member a stage puts in each journal so that it exists (an empty set does not). A doc id equal to it
# would only be taken as written by the follower: the version rule instead of a plain replace at publish.
JOURNAL_OPEN = ""


def client_options(follower: FollowerConfig) -> dict[str, Any]:
    """The follower's ACL user, password and CA as the client's options (``None``: not set); never in the URL."""
    return {"username": follower.username, "password": secret(follower.password), "ssl_ca_certs": follower.tls_ca}


class RedisSink:
    """Applies rows to ``<prefix>:<target>:<doc_id>`` hashes; see the module docstring."""

    order_free = True  # the version rule decides, whatever order writes land in (sync.sinks)
    fill_order_free = True
    needs_spark = False
    chunk_rows: int | None = 1000  # the follower writes chunks of this many records, parsing the next meanwhile
    writers = 2  # a batch's chunks written at once: the server works on one while the client parses the other's answer
    fill_writers = 2  # a bootstrap's or reindex's: its one server thread, not the client, sets a fill's pace

    @classmethod
    def from_config(cls, config: Config, follower: FollowerConfig, spark: object = None) -> RedisSink:
        return cls(follower.name, follower.url or "", prefix=follower.prefix, **client_options(follower))

    @staticmethod
    def probe(config: Config, follower: FollowerConfig, timeout_s: float) -> tuple[bool, str]:
        auth = {k: v for k, v in client_options(follower).items() if v is not None}
        client = redis.Redis.from_url(
            follower.url or "", socket_timeout=timeout_s, socket_connect_timeout=timeout_s, **auth
        )
        try:
            client.ping()
        finally:
            client.close()
        return True, "redis answers PING"

    def __init__(
        self,
        name: str,
        url: str,
        prefix: str = "cdc",
        *,
        username: str | None = None,
        password: str | None = None,
        ssl_ca_certs: str | None = None,
    ) -> None:
        self.name = name
        self.url = redact_url(url)
        self.prefix = prefix
        self.generations = Generations()  # target -> its staged key space (``<prefix>~<time>``), until publish
        # ACL user, password and CA as options, not in the URL; unset ones are not passed (a plain redis://
        # connection takes no ssl_* option).
        auth = {"username": username, "password": password, "ssl_ca_certs": ssl_ca_certs}
        self._client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=30,
            socket_connect_timeout=10,
            **{k: v for k, v in auth.items() if v is not None},
        )

    def learn(self, mapping: TableMapping) -> None:
        """Nothing to prepare: hash fields are canonical strings whatever the column's type."""
        self.open([mapping])

    def open(self, mappings: Sequence[TableMapping]) -> None:
        """Check the target names and load the apply script (nothing else to create)."""
        for mapping in mappings:
            self._check_target(mapping.target)
        self._load_script()

    def settle(self) -> None:
        """Nothing deferred: ``forget`` removes the fields at once."""

    def make_visible(self, targets: Sequence[str]) -> None:
        """Nothing to do: a write is visible when Redis acknowledges it."""

    def forget(self, target: str, fields: Sequence[str]) -> None:
        """Remove ``fields`` from every row hash of ``target`` (DROP COLUMN); ``_v`` stays, so versions still order."""
        self._check_target(target)
        head = f"{self._generation_of(target)}:{target}:"
        keys = 0
        with self._errors("forget"):
            batch: list[str] = []
            for key in self._client.scan_iter(match=_glob_escape(head) + "*", count=SCAN_COUNT):
                batch.append(key)
                if len(batch) >= SCAN_COUNT:
                    keys += self._hdel(batch, fields)
                    batch = []
            keys += self._hdel(batch, fields)
        generation = self._generation_of(target)
        log.info("generation=%s target=%s dropped_fields=%s rows=%d", generation, target, list(fields), keys)

    def _hdel(self, keys: list[str], fields: Sequence[str]) -> int:
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.hdel(key, *fields)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, RedisError) and classify(reply) != "reject":  # WRONGTYPE: not a row hash
                raise reply
        return len(keys)

    def _generation_of(self, target: str) -> str:
        """Where write() and held() go for ``target``: the prefix, or its staged generation's key space."""
        return self.generations.where(target, self.prefix)

    def row_key(self, target: str, doc_id: str, generation: str | None = None) -> str:
        return f"{generation or self._generation_of(target)}:{target}:{doc_id}"

    def marker_key(self, target: str, generation: str | None = None) -> str:
        return f"{generation or self._generation_of(target)}:_deleted:{target}"

    def journal_key(self, target: str, generation: str | None = None) -> str:
        """The set of ids the running follower wrote since a reindex of ``target`` staged (module docstring).

        Only the live generation's journal is ever created; a staged instance's writes name one that never exists.
        """
        return f"{generation or self._generation_of(target)}~written:{target}"

    # ------------------------------------------------------------------ generations

    def take_over(self, staged: Mapping[str, str], mappings: Sequence[TableMapping]) -> None:
        """Write to another process's staged generations (``snapshot.parallel``): they exist already."""
        self.generations = Generations(staged)

    def stage(self, mappings: Sequence[TableMapping]) -> None:
        """Drop leftovers of an unpublished stage, open the journals; write and read a new generation from now on."""
        self.open(mappings)
        targets = sorted({m.target for m in mappings})
        with self._errors("dropping an unpublished stage"):
            journals = self._client.scan_iter(match=_glob_escape(f"{self.prefix}~") + "*", count=SCAN_COUNT)
            for keys in batched(journals, PIPELINE_COMMANDS):
                self._client.unlink(*keys)
            for target in targets:  # from now on the running follower notes every id it writes
                self._client.sadd(self.journal_key(target, self.prefix), JOURNAL_OPEN)
        generation = f"{self.prefix}~{time.time_ns():x}"
        for target in targets:
            self.generations.stage(target, generation)

    def publish(self) -> None:
        """Make the live keys the staged generation plus the follower's writes since the stage (module docstring)."""
        live = self.prefix
        with self._errors("publish"):  # a killed or failed publish is finished by the next reindex (docs/reindex.md)
            for target, staged in self.generations.items():
                # Pass 1: live rows and markers the staged generation does not know and the follower did not write.
                self._publish_scan(PURGE_SHA, target, live, staged)
                markers = self.marker_key(target, live)
                for ids in batched(self._marker_ids(markers), PIPELINE_COMMANDS):
                    self._publish_calls(PURGE_SHA, target, "marker", [(markers, i) for i in ids])
                # Pass 2: every staged row and marker replaces the live key.
                self._publish_scan(PROMOTE_SHA, target, staged, live)
                markers = self.marker_key(target, staged)
                for ids in batched(self._marker_ids(markers), PIPELINE_COMMANDS):
                    self._publish_calls(PROMOTE_SHA, target, "marker", [(markers, i) for i in ids])
            for target in self.generations:
                self._client.unlink(self.journal_key(target, live))
        self.generations.clear()

    def _shared_key(self, sha: str, target: str) -> str:
        """KEYS[1] of a publish call: the staged marker hash for the purge, the live one for the promote."""
        return self.marker_key(target, self._generation_of(target) if sha == PURGE_SHA else self.prefix)

    def _publish_scan(self, sha: str, target: str, scanned: str, other: str) -> None:
        """Run the purge or promote script over ``target``'s row keys in generation ``scanned``, found by the server.

        Each call scans PUBLISH_SCAN_COUNT keys on from the cursor the previous one answered (PUBLISH_IDS).
        """
        keys = [self._shared_key(sha, target), self.journal_key(target, self.prefix)]
        head, cursor = self.row_key(target, "", scanned), "0"
        argv = ["scan", cursor, _glob_escape(head) + "*", head, self.row_key(target, "", other), PUBLISH_SCAN_COUNT]
        while True:
            argv[1] = cursor
            (reply,) = self._evalsha_all(sha, [(keys, argv)])
            if isinstance(reply, RedisError):
                with self._errors("publish"):
                    raise reply
            cursor = reply[0]
            if cursor == "0":
                return

    def _publish_calls(self, sha: str, target: str, kind: str, found: list[tuple[str, str]]) -> None:
        """Run the purge or promote script on (key, id) pairs, ROWS_PER_CALL a call (KEYS: the scripts' comments)."""
        shared = [self._shared_key(sha, target), self.journal_key(target, self.prefix)]
        other = self._generation_of(target) if sha == PURGE_SHA else self.prefix  # the other generation's row keys
        calls = []
        for start in range(0, len(found), ROWS_PER_CALL):
            part = found[start : start + ROWS_PER_CALL]
            keys = [*shared, *(k for key, i in part for k in (key, self.row_key(target, i, other)))]
            calls.append((keys, [kind, *(i for _, i in part)]))
        for reply in self._evalsha_all(sha, calls):
            if isinstance(reply, RedisError):
                with self._errors("publish"):
                    raise reply

    # ------------------------------------------------------------------ write

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        """Apply the rows in script calls of many rows of one target each, several calls pipelined per round trip."""
        result = WriteResult()
        calls: list[_Call] = []
        filling: dict[str, _Call] = {}  # target -> its call being filled
        for row in rows:
            self._check_target(row.target)
            try:
                key, encoded = self._script_args(row)
            except ValueError as err:
                result.rejected.append((row, str(err)))
                continue
            call = filling.get(row.target)
            if call is None or call.full(len(encoded)):
                call = filling[row.target] = _Call(self.marker_key(row.target), self.journal_key(row.target))
                calls.append(call)
            call.add(row, key, encoded)
        for start in range(0, len(calls), CALLS_PER_ROUND):
            result = result.merge(self._apply(calls[start : start + CALLS_PER_ROUND]))
        return result  # the follower logs the batch's counts

    def _script_args(self, row: Row) -> tuple[str, bytes]:
        """The row's key and its JSON array for the apply script (layout above APPLY)."""
        if row.version < 0:  # the script compares canonical non-negative decimal strings
            raise ValueError(f"version {row.version} is negative")
        key = self.row_key(row.target, row.doc_id)
        head = [row.doc_id, str(row.version)]
        if row.doc is None:
            return key, orjson.dumps([*head, "d"])
        fields = self.stored_form(row.doc)
        if VERSION_FIELD in fields:
            raise ValueError(f"column {VERSION_FIELD!r} collides with the version field of the Redis sink")
        try:
            return key, orjson.dumps([*head, "u", fields])
        except orjson.JSONEncodeError as err:  # a lone surrogate: no UTF-8 form to store
            raise ValueError(f"a field or value is not valid unicode: {err}") from None

    def _apply(self, calls: list[_Call]) -> WriteResult:
        result = WriteResult()
        for call, reply in zip(calls, self._evalsha_all(APPLY_SHA, [c.args() for c in calls]), strict=True):
            if isinstance(reply, RedisError) and classify(reply) == "script" and len(call.rows) > 1:
                # The script itself failed, not a command of one row (those come back per row): run
                # these rows one per call, so whatever causes it rejects its own row only. Rows the
                # failed call applied already count as older then.
                result = result.merge(self._apply(call.split()))
            else:
                result = result.merge(self._outcomes(call, reply))
        return result

    def _outcomes(self, call: _Call, reply: Any) -> WriteResult:
        """Count one call's answer (a byte per row, then the refused rows' errors); any other answer stops the batch."""
        if isinstance(reply, RedisError):
            if classify(reply) != "script":
                with self._errors("write"):
                    raise reply
            return WriteResult(rejected=[(row, str(reply)) for row, _, _ in call.rows])  # a call of one row
        statuses = reply[0] if isinstance(reply, list) and reply else None
        if (
            not isinstance(statuses, str)
            or len(statuses) != len(call.rows)
            or len(reply) != 1 + statuses.count("e")
            or statuses.count("1") + statuses.count("0") + statuses.count("e") != len(statuses)
        ):
            raise FatalError(f"redis {self.url}: the apply script answered {len(call.rows)} rows with {reply!r:.200}")
        result = WriteResult(applied=statuses.count("1"), older=statuses.count("0"))
        if len(reply) > 1:
            errors = iter(reply[1:])
            for (row, _, _), status in zip(call.rows, statuses, strict=True):
                if status != "e":
                    continue
                error = next(errors)
                if not isinstance(error, RedisError):
                    raise FatalError(f"redis {self.url}: the apply script answered {error!r:.200} for a refused row")
                if classify(error) != "reject":
                    with self._errors("write"):
                        raise error
                result.rejected.append((row, str(error)))
        return result

    def _evalsha_all(self, sha: str, calls: Sequence[tuple[list[str], Sequence[str | bytes]]]) -> list[Any]:
        """One script call per (keys, argv), pipelined; each call's reply or error, in order."""
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for i in todo:
                keys, argv = calls[i]
                pipe.execute_command("EVALSHA", sha, len(keys), *keys, *argv)  # evalsha() is typed for str only
            with self._errors("script call"):
                answers = pipe.execute(raise_on_error=False)
            for i, answer in zip(todo, answers, strict=True):
                replies[i] = answer
            # Restart or SCRIPT FLUSH: these calls did not run; load the scripts and run them again.
            todo = [i for i in todo if isinstance(replies[i], NoScriptError)]
            if not todo:
                return replies
            self._load_script()
        raise RetryableError(f"redis {self.url}: the scripts vanished twice in one batch (SCRIPT FLUSH?)")

    def _load_script(self) -> None:
        for name, (text, expected) in SCRIPTS.items():
            with self._errors("SCRIPT LOAD (Lua scripting must be allowed)"):
                sha = self._client.script_load(text)
            if sha != expected:
                raise FatalError(f"redis {self.url} hashed the {name} script as {sha}, expected {expected}")

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return mapped(what, self._mapped)

    def _mapped(self, err: Exception, what: str) -> Exception | None:
        """A Redis failure met during ``what`` as one of the two error roots (a per-row reply too: ``write`` alone
        takes those row by row)."""
        return root(err, what, self.url, self.name, self.prefix) if isinstance(err, RedisError) else None

    def _check_target(self, target: str) -> None:
        if not target or ":" in target or target == "_deleted":
            raise FatalError(f"redis sink {self.name}: target {target!r} must be non-empty, without ':', not _deleted")

    # ------------------------------------------------------------------ read

    def held(self, target: str) -> dict[str, tuple[int, dict[str, Any]]]:
        """Every row hash of the target: ``{doc_id: (version, fields without _v)}``."""
        return {ident: (version, fields) for ident, version, fields in self.scan(target)}

    def scan(self, target: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Every row hash, ``SCAN_COUNT`` keys a round trip: ``(doc_id, version, fields without _v)``.

        SCAN may return a key twice (the keyspace rehashed meanwhile): a reader keeps the last.
        """
        self._check_target(target)
        head = f"{self._generation_of(target)}:{target}:"
        with self._errors("scan"):
            keys = self._client.scan_iter(match=_glob_escape(head) + "*", count=SCAN_COUNT)
            for chunk in batched(keys, PIPELINE_COMMANDS):
                yield from self._rows(head, chunk)

    def lookup(self, target: str, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live rows of these ids that the target holds, a pipeline of hash reads at a time."""
        self._check_target(target)
        head = f"{self._generation_of(target)}:{target}:"
        with self._errors("lookup"):
            for chunk in batched(ids, PIPELINE_COMMANDS):
                yield from self._rows(head, [head + ident for ident in chunk])

    def _marker_ids(self, markers: str) -> Iterator[str]:
        return (ident for ident, _ in self._client.hscan_iter(markers, count=SCAN_COUNT))

    def _rows(self, head: str, keys: list[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        pipe = self._client.pipeline(transaction=False)
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

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The canonical document as the row hash stores it: strings only, ``None`` fields left out."""
        return {field: _text(value) for field, value in doc.items() if value is not None}

    def close(self) -> None:
        self._client.close()


@dataclass
class _Call:
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

    def split(self) -> list[_Call]:
        return [_Call(self.marker, self.journal, [part], len(part[2])) for part in self.rows]


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


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
