"""How the Redis sink takes an error from Redis: the codes, ``classify``, and the two error roots.

The Redis sink's module docstring has the table. Only REJECTED_CODES are
about one row; every other answer stops the batch, and an answer not listed
anywhere is retried, then stops the follower (``Follower.max_attempts``):
never a dead letter.
"""

from __future__ import annotations

from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cdcsync.errors import FatalError, RetryableError

# Codes are the message's first word, as redis-py leaves it for the codes it maps to no class (in a
# script's per-row replies: all of them).
REJECTED_CODES = ("WRONGTYPE",)  # the row's key, or its target's marker hash, holds another type
RETRYABLE_CODES = frozenset(
    {"BUSY", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "MISCONF", "NOREPLICAS", "OOM", "READONLY", "TRYAGAIN"}
)
FATAL_CODES = frozenset({"ASK", "CROSSSLOT", "MOVED", "NOAUTH", "NOPERM", "WRONGPASS"})


def classify(err: RedisError) -> str:
    """How a Redis error is taken: 'reject', 'script', 'retry', 'fatal' or 'unknown' (module docstring).

    'reject': a reply about one row (REJECTED_CODES). 'script': the apply script itself failed (a Lua
    error, e.g. cjson could not decode a row): its rows are tried one per call, and the row that still
    fails alone is rejected. 'unknown' is retried like 'retry', its message saying it is unclassified.
    """
    if isinstance(err, AuthenticationError | NoPermissionError):
        return "fatal"
    # redis-py strips the codes it maps to a class (OOM, READONLY, LOADING); other codes stay in the text.
    if isinstance(err, RedisConnectionError | RedisTimeoutError | OutOfMemoryError | ReadOnlyError):
        return "retry"
    text = str(err)
    code = text.split(" ", 1)[0]
    if code in REJECTED_CODES:
        return "reject"
    if code in RETRYABLE_CODES or "Script killed by user" in text:  # SCRIPT KILL: the rows did not run
        return "retry"
    if code in FATAL_CODES or _ACL_REFUSAL in text or "unknown command" in text:
        return "fatal"
    if "user_script:" in text or "Error running script" in text:  # Redis >= 7.0; before 7.0
        return "script"
    return "unknown"


# What Redis 7.0 answers, with no code, when an ACL keeps the script from running a command.
_ACL_REFUSAL = "can't run this command or subcommand"


def root(err: RedisError, what: str, url: str, sink: str, prefix: str) -> Exception:
    """``err``, met during ``what`` by sink ``sink`` (server ``url``, keys under ``prefix``): Retryable or Fatal.

    A per-row reply outside ``write`` is fatal too. A refusal names what to grant.
    """
    kind = classify(err)
    if kind == "retry":
        return RetryableError(f"redis {url} unavailable for {what}: {err}", retry_after=2.0)
    if kind == "unknown":  # in doubt: retry, and the follower stops after its attempts; never reject
        return RetryableError(
            f"redis {url}: unclassified error during {what}, retrying: {type(err).__name__}: {err}",
            retry_after=2.0,
        )
    hint = ""
    if isinstance(err, NoPermissionError) or _ACL_REFUSAL in str(err) or str(err).startswith("NOPERM"):
        hint = (
            f"; grant the user of sink {sink} the commands EVALSHA, SCRIPT LOAD, HGET, HSET, HDEL, HEXISTS,"
            f" DEL, EXISTS, RENAME, SADD, SISMEMBER, SCAN, HSCAN, UNLINK, HGETALL and the keys {prefix}:*"
            f" and {prefix}~* (ACL SETUSER)"
        )
    elif str(err).split(" ", 1)[0] in ("MOVED", "ASK", "CROSSSLOT"):
        hint = "; the redis sink needs one server or a primary with replicas, not Redis Cluster"
    return FatalError(f"redis {url} refused {what}: {type(err).__name__}: {err}{hint}")
