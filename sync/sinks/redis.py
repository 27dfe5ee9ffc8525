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
- **Errors** (``redis_errors``; the sink contract's rule: only an error about
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
  one target's keys  ``TableError``: an ACL that leaves out the call's keys
                     (``NOPERM`` ... keys): that table is held alone, the
                     follower's others go on (``sync.held``); the fix names
                     the key patterns to grant
  needs a person     ``FatalError``: ``NOAUTH``, ``WRONGPASS``, ``NOPERM`` and
                     an ACL refusal inside the script (the message lists what
                     to grant); ``MOVED``, ``ASK``, ``CROSSSLOT`` (Redis
                     Cluster is not supported); ``ERR unknown command``
  anything else      ``RetryableError`` ("unclassified"), then ``FatalError``:
                     never rejected
  =================  ==========================================================

Generations (``stage``/``publish``, ``redis_generations``): a bootstrap or
reindex writes a staged key space ``P~G`` that no reader looks at, while a
journal per target notes the ids the running follower writes meanwhile;
``publish`` then makes each live target the staged generation plus those
writes, key by key. Each key switches atomically (a RENAME replaces it in one
step), but not all keys at one instant; a row the source holds is never missing.

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

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import redis
from redis.exceptions import NoScriptError, RedisError

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import FatalError, RetryableError, mapped
from cdcsync.sync.mapping import Row, TableMapping
from cdcsync.sync.sink import Generations, Sink, WriteResult, redact_url
from cdcsync.sync.sinks import redis_apply as apply
from cdcsync.sync.sinks import redis_reads as reads
from cdcsync.sync.sinks import secret
from cdcsync.sync.sinks.redis_errors import classify, root
from cdcsync.sync.sinks.redis_generations import Publish, next_generation
from cdcsync.sync.sinks.redis_scripts import APPLY_SHA, SCRIPTS

log = logging.getLogger(__name__)


def client_options(follower: FollowerConfig) -> dict[str, Any]:
    """The follower's ACL user, password and CA as the client's options (``None``: not set); never in the URL."""
    return {"username": follower.username, "password": secret(follower.password), "ssl_ca_certs": follower.tls_ca}


class RedisSink(Sink):
    """Applies rows to ``<prefix>:<target>:<doc_id>`` hashes; see the module docstring."""

    order_free = True  # the version rule decides, whatever order writes land in (sync.sinks)

    holds_objects = False  # a hash holds text: a document of related tables is one JSON field
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
            for key in self._client.scan_iter(match=reads.glob_escape(head) + "*", count=reads.SCAN_COUNT):
                batch.append(key)
                if len(batch) >= reads.SCAN_COUNT:
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
        """The set of ids the running follower wrote since a reindex of ``target`` staged (``redis_generations``).

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
        generation = next_generation(self._client, self.prefix, targets, self, self._errors)
        for target in targets:
            self.generations.stage(target, generation)

    def publish(self) -> None:
        """Make the live keys the staged generation plus the follower's writes since the stage (``Publish``)."""
        self._publication().run()
        self.generations.clear()

    def _publication(self) -> Publish:
        return Publish(self._client, self.prefix, self.generations, self, self._evalsha_all, self._errors)

    # ------------------------------------------------------------------ write

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult:
        """Apply the rows in script calls of many rows of one target each, several calls pipelined per round trip."""
        result = WriteResult()
        calls: list[apply.Call] = []
        filling: dict[str, apply.Call] = {}  # target -> its call being filled
        for row in rows:
            self._check_target(row.target)
            try:
                key, encoded = self._script_args(row)
            except ValueError as err:
                result.rejected.append((row, str(err)))
                continue
            call = filling.get(row.target)
            if call is None or call.full(len(encoded)):
                call = filling[row.target] = apply.Call(self.marker_key(row.target), self.journal_key(row.target))
                calls.append(call)
            call.add(row, key, encoded)
        for start in range(0, len(calls), apply.CALLS_PER_ROUND):
            result = result.merge(self._apply(calls[start : start + apply.CALLS_PER_ROUND]))
        return result  # the follower logs the batch's counts

    def _script_args(self, row: Row) -> tuple[str, bytes]:
        """The row's key and its JSON array for the apply script (``redis_apply.encode``)."""
        return self.row_key(row.target, row.doc_id), apply.encode(row)

    def _apply(self, calls: list[apply.Call]) -> WriteResult:
        result = WriteResult()
        for call, reply in zip(calls, self._evalsha_all(APPLY_SHA, [c.args() for c in calls]), strict=True):
            if isinstance(reply, RedisError) and classify(reply) == "script" and len(call.rows) > 1:
                # The script itself failed, not a command of one row (those come back per row): run
                # these rows one per call, so whatever causes it rejects its own row only. Rows the
                # failed call applied already count as older then.
                result = result.merge(self._apply(call.split()))
            else:
                result = result.merge(apply.outcomes(call, reply, self.url, self._errors))
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
        """Every row hash, a SCAN at a time: ``(doc_id, version, fields without _v)`` (``redis_reads.scan``)."""
        self._check_target(target)
        yield from reads.scan(self._client, f"{self._generation_of(target)}:{target}:", self._errors)

    def lookup(self, target: str, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live rows of these ids that the target holds, a pipeline of hash reads at a time."""
        self._check_target(target)
        yield from reads.lookup(self._client, f"{self._generation_of(target)}:{target}:", ids, self._errors)

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The canonical document as the row hash stores it: strings only, ``None`` fields left out."""
        return apply.stored_form(doc)

    def close(self) -> None:
        self._client.close()
