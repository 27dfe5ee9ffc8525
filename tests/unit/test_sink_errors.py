"""Which server errors reject a row and which stop the batch: no server, the answers are given as plain data.

A rejected row goes to the dead-letter topic and its offset commits, so only
errors that are about that one row may reject it. Everything else, including
every error the sinks do not know, raises ``RetryableError`` or ``FatalError``
and the batch is replayed or the follower stops (issue 11, "no change is ever
lost silently").
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from cdcsync.errors import FatalError, RetryableError, TableError
from cdcsync.events import Change
from cdcsync.sync.mapping import Row
from cdcsync.sync.sinks.elasticsearch import ElasticsearchSink
from cdcsync.sync.sinks.redis import RedisSink
from tests.unit.test_redis_replies import per_row


def rows(n: int) -> list[Row]:
    def row(i: int) -> Row:
        doc = {"id": i, "name": f"n{i}"}
        return Row(Change("test", "public.items", "u", {"id": i}, doc, None, 10, "topic", 0, i), "items", str(i), doc)

    return [row(i) for i in range(n)]


# --------------------------------------------------------------------------- Redis

SCRIPT_ERROR = (
    "user_script:48: Expected value but found invalid token at character 1 "
    "script: f7660af48968c6d56b217e60ba750e52272eb3cb, on @user_script:48."
)  # what Redis 7.0 answered on this stack when cjson could not decode a call's rows
ACL_REFUSAL = "The user executing the script can't run this command or subcommand"  # Redis 7.0, no code

REDIS_RETRYABLE = [
    ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk"),
    ResponseError("CLUSTERDOWN The cluster is down"),
    ResponseError("NOREPLICAS Not enough good replicas to write."),
    ResponseError("BUSY Redis is busy running a script."),
    ResponseError("TRYAGAIN Multiple keys request during rehashing of slot"),
    ResponseError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
    ResponseError("LOADING Redis is loading the dataset in memory"),  # as a nested reply: no class mapped
    ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
    ResponseError("READONLY You can't write against a read only replica."),
    BusyLoadingError("Redis is loading the dataset in memory"),
    OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    ReadOnlyError("You can't write against a read only replica."),
    RedisConnectionError("Error 111 connecting to 127.0.0.1:16379. Connection refused."),
    ResponseError("SOMENEWCODE an error no release of cdcsync has seen"),  # unknown: retry, then stop
    ResponseError("ERR something went wrong"),
    ResponseError("Script killed by user with SCRIPT KILL..."),
]
REDIS_FATAL = [
    ResponseError(ACL_REFUSAL),
    AuthenticationError("invalid username-password pair or user is disabled."),
    ResponseError("NOPERM User cdc has no permissions to run the 'hset' command"),
    ResponseError("MOVED 3999 127.0.0.1:6381"),
    ResponseError("CROSSSLOT Keys in request don't hash to the same slot"),
    ResponseError("ERR unknown command 'EVALSHA', with args beginning with: "),
]


def redis_answering(monkeypatch: pytest.MonkeyPatch, answer: Any) -> RedisSink:
    """A sink whose every script call gets ``answer`` (the client never connects)."""
    sink = RedisSink("redis-test", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(sink, "_evalsha_all", lambda sha, calls: [answer] * len(calls))
    return sink


@pytest.mark.parametrize("error", REDIS_RETRYABLE, ids=repr)
def test_a_redis_error_that_passes_or_is_unknown_retries_the_batch_and_rejects_no_row(
    monkeypatch: pytest.MonkeyPatch, error: RedisError
) -> None:
    with pytest.raises(RetryableError, match="redis"):
        redis_answering(monkeypatch, per_row(1, error, 1)).write(1, rows(3))  # one row's answer
    with pytest.raises(RetryableError, match="redis"):
        redis_answering(monkeypatch, error).write(1, rows(3))  # the whole call's answer


@pytest.mark.parametrize("error", REDIS_FATAL, ids=repr)
def test_a_redis_refusal_a_person_must_fix_stops_the_follower_and_rejects_no_row(
    monkeypatch: pytest.MonkeyPatch, error: RedisError
) -> None:
    with pytest.raises(FatalError, match="redis"):
        redis_answering(monkeypatch, per_row(1, error, 1)).write(1, rows(3))
    with pytest.raises(FatalError, match="redis"):
        redis_answering(monkeypatch, error).write(1, rows(3))


def test_a_call_whose_keys_the_acl_leaves_out_is_its_table_s_failure_naming_the_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = NoPermissionError("this user has no permissions to access one of the keys used as arguments")
    sink = redis_answering(monkeypatch, refused)
    with pytest.raises(TableError, match="refused the keys of target") as held:
        sink.write(1, rows(3))
    target = rows(1)[0].target
    assert held.value.target == target and f"~{sink.prefix}:{target}:*" in held.value.fix


def test_an_acl_refusal_inside_the_script_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FatalError, match="ACL"):
        redis_answering(monkeypatch, per_row(*[ResponseError(ACL_REFUSAL)] * 3)).write(1, rows(3))


def test_wrongtype_rejects_its_row_only(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    result = redis_answering(monkeypatch, per_row(1, refused, 0)).write(1, rows(3))
    assert (result.applied, result.older) == (1, 1)
    assert [(row.doc_id, reason) for row, reason in result.rejected] == [("1", str(refused))]


def test_a_script_error_rejects_the_row_it_still_fails_for_when_called_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    result = redis_answering(monkeypatch, ResponseError(SCRIPT_ERROR)).write(1, rows(3))
    assert [row.doc_id for row, _ in result.rejected] == ["0", "1", "2"]  # every one-row call failed too


def test_redis_classification_of_plain_errors() -> None:
    from cdcsync.sync.sinks.redis_errors import REJECTED_CODES, classify

    assert REJECTED_CODES == ("WRONGTYPE",)
    assert classify(ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")) == "reject"
    assert classify(ResponseError(SCRIPT_ERROR)) == "script"
    assert classify(ResponseError("ERR Error running script (call to f_0123): @user_script:9: bad")) == "script"
    assert classify(ResponseError("ERR Error running script: Script killed by user with SCRIPT KILL")) == "retry"
    assert {classify(e) for e in REDIS_FATAL} == {"fatal"}
    assert {classify(e) for e in REDIS_RETRYABLE} <= {"retry", "unknown"}
    assert classify(ResponseError("SOMENEWCODE never seen")) == "unknown"
    assert classify(ResponseError("MISCONF cannot persist")) == "retry"


# --------------------------------------------------------------------------- Elasticsearch

CLOSED = {"type": "index_closed_exception", "reason": "closed", "index_uuid": "u", "index": "cdc-items-000001"}
ES_NOT_REJECTED: list[tuple[int, dict[str, Any], type[Exception], str]] = [
    (400, CLOSED, TableError, r"POST cdc-items-000001/_open"),  # this table's alone: held (sync.held)
    (429, {"type": "es_rejected_execution_exception", "reason": "rejected execution"}, RetryableError, "429"),
    (429, {"type": "circuit_breaking_exception", "reason": "[parent] Data too large"}, RetryableError, "429"),
    (503, {"type": "unavailable_shards_exception", "reason": "primary shard is not active"}, RetryableError, "503"),
    (
        403,
        {"type": "cluster_block_exception", "reason": "index [x] blocked by: [FORBIDDEN/8/index write (api)];"},
        TableError,
        "index.blocks.write",
    ),  # fmt: skip
    (
        403,
        {"type": "cluster_block_exception", "reason": "blocked by: [SERVICE_UNAVAILABLE/1/state not recovered];"},
        RetryableError,
        "state not recovered",
    ),  # fmt: skip
    (500, {"type": "some_future_exception", "reason": "never seen"}, RetryableError, "some_future_exception"),
    (400, {"type": "illegal_state_exception", "reason": "unexpected"}, RetryableError, "illegal_state_exception"),
    (
        400,
        {"type": "illegal_argument_exception", "reason": "no write index is defined for alias [cdc-items]."},
        RetryableError,
        "no write index",
    ),  # fmt: skip
    (404, {"type": "index_not_found_exception", "reason": "no such index [cdc-items]"}, FatalError, "open"),
    (
        403,
        {"type": "security_exception", "reason": "action [indices:data/write/bulk[s]] is unauthorized"},
        FatalError,
        "privilege",
    ),  # fmt: skip
]
ES_REJECTED: list[tuple[int, dict[str, Any]]] = [
    (400, {"type": "document_parsing_exception", "reason": "[1:12] failed to parse field [n] of type [long]"}),
    (400, {"type": "mapper_parsing_exception", "reason": "failed to parse field [at] of type [date]"}),
    (400, {"type": "strict_dynamic_mapping_exception", "reason": "mapping set to strict, dynamic introduction of [x]"}),
    (400, {"type": "illegal_argument_exception", "reason": "Limit of total fields [1000] has been exceeded"}),
    (400, {"type": "illegal_argument_exception", "reason": "mapper [n] cannot be changed from type [long] to [text]"}),
    (400, {"type": "illegal_argument_exception", "reason": "Document contains at least one immense term in field"}),
]


def es_answering(monkeypatch: pytest.MonkeyPatch, answers: list[dict[str, Any]]) -> ElasticsearchSink:
    """A sink whose bulk requests get ``answers`` as their items (the client never connects)."""
    sink = ElasticsearchSink("es-test", "http://127.0.0.1:1", index_prefix="cdc-")
    monkeypatch.setattr(sink._client, "bulk", lambda **kw: {"items": [{"index": a} for a in answers]})
    return sink


@pytest.mark.parametrize(("status", "error", "raised", "message"), ES_NOT_REJECTED, ids=lambda v: str(v)[:40])
def test_an_elasticsearch_item_error_not_about_its_row_raises_and_rejects_no_row(
    monkeypatch: pytest.MonkeyPatch, status: int, error: dict[str, Any], raised: type[Exception], message: str
) -> None:
    answers = [{"status": 201}, {"status": status, "error": error}, {"status": 201}]
    with pytest.raises(raised) as caught:
        es_answering(monkeypatch, answers).write(1, rows(3))
    said = f"{caught.value} {caught.value.fix}" if isinstance(caught.value, TableError) else str(caught.value)
    assert re.search(message, said), said
    if isinstance(caught.value, TableError):
        assert caught.value.target == "items"


@pytest.mark.parametrize(("status", "error"), ES_REJECTED, ids=lambda v: str(v)[:40])
def test_an_elasticsearch_item_error_about_its_row_rejects_that_row(
    monkeypatch: pytest.MonkeyPatch, status: int, error: dict[str, Any]
) -> None:
    answers = [{"status": 201}, {"status": status, "error": error}, {"status": 409, "error": {"type": "x"}}]
    answers[2]["error"] = {"type": "version_conflict_engine_exception", "reason": "version conflict"}
    result = es_answering(monkeypatch, answers).write(1, rows(3))
    assert (result.applied, result.older, [row.doc_id for row, _ in result.rejected]) == (1, 1, ["1"])
    assert result.rejected[0][1].startswith(error["type"])


def test_an_id_longer_than_elasticsearch_takes_is_stored_under_its_digest_and_kept_whole() -> None:
    # ES refuses an id over 512 bytes for the WHOLE bulk request (action_request_validation_exception).
    import orjson

    from cdcsync.sync.sinks.elasticsearch_bulk import encode
    from cdcsync.sync.sinks.elasticsearch_fields import KEY_FIELD, stored_id

    row = rows(1)[0]
    for long_id in ("é" * 257, "u" * 513, "x" * 100_000):  # 514, 513, 100,000 bytes
        row.doc_id = long_id
        action, source = (orjson.loads(line) for line in encode(row, 0, "idx", False))
        assert action["index"]["_id"] == stored_id(long_id) and len(action["index"]["_id"].encode()) <= 512
        assert source[KEY_FIELD] == long_id
    assert stored_id("é" * 256) == "é" * 256  # 512 bytes: itself
    assert stored_id("a" * 600) != stored_id("a" * 601)
    row.doc_id = "k"
    assert KEY_FIELD not in orjson.loads(encode(row, 0, "idx", False)[1])
    row.doc_id = "\ud800" * 300  # a lone surrogate has no UTF-8 form: refused as before
    with pytest.raises(UnicodeEncodeError):
        encode(row, 0, "idx", False)


def test_a_read_returns_a_long_id_whole_and_without_the_field_holding_it() -> None:
    from cdcsync.sync.sinks.elasticsearch_fields import KEY_FIELD, stored_id
    from cdcsync.sync.sinks.elasticsearch_reads import _read

    long_id = "u" * 600
    hit = {"_id": stored_id(long_id), "_version": 7}
    source = {"v": 1, "cdcsync_version": 7, "cdcsync_deleted": False, KEY_FIELD: long_id}
    assert _read(hit, source) == (long_id, 7, {"v": 1})
    assert _read({"_id": "3", "_version": 2}, {"v": 2, "cdcsync_version": 2}) == ("3", 2, {"v": 2})


def test_elasticsearch_classification_of_plain_answers() -> None:
    from cdcsync.sync.sinks.elasticsearch_errors import REJECTED_TYPES, classify_item

    assert "index_closed_exception" not in REJECTED_TYPES
    assert classify_item(201, None) == "applied"
    assert classify_item(409, {"type": "version_conflict_engine_exception"}) == "older"
    assert classify_item(409, {"type": "some_other_conflict"}) == "unknown"
    assert classify_item(400, CLOSED) == "closed"
    assert classify_item(400, {"type": "index_closed_exception"}) == "closed"
    for status, error in ES_REJECTED:
        assert classify_item(status, error) == "reject"
    assert classify_item(400, {"type": "illegal_argument_exception", "reason": "pipeline [p] does not exist"}) == (
        "unknown"
    )
    assert classify_item(418, {"type": "teapot_exception"}) == "unknown"
    assert classify_item(400, {}) == "unknown"


def test_elasticsearch_stores_nan_and_the_infinities_as_text_it_can_hold() -> None:
    """A JSON number cannot be NaN or infinite; the float field ignores the text, _source keeps it."""
    from cdcsync.sync.sinks.elasticsearch_bulk import _json_safe
    from cdcsync.sync.sinks.elasticsearch_fields import FIELD_TYPES

    assert [_json_safe(v) for v in (float("nan"), float("inf"), float("-inf"), -0.0, 2.5)] == [
        "NaN",
        "Infinity",
        "-Infinity",
        -0.0,
        2.5,
    ]
    assert _json_safe([1.0, float("nan")]) == [1.0, "NaN"]
    assert FIELD_TYPES["float"]["ignore_malformed"] is True


def test_field_names_elasticsearch_refuses_are_named_with_the_column_and_the_rename_to_set() -> None:
    from cdcsync.sync.sinks.elasticsearch_fields import refused_fields

    fine = {"a.b": "a.b", "a.": "a.", "Order Id": "Order Id", "_x": "_x", "ünï": "ünï"}
    assert refused_fields("public.t", fine) == []
    problems = refused_fields("public.t", {"_id": "_id", "a": "a", "a.b": "a.b", ".b": ".b", "c..d": "c..d"})
    assert [p.split(" as field")[0] for p in problems] == [
        "table public.t: column '_id'", "table public.t: column 'a'", "table public.t: column '.b'",
        "table public.t: column 'c..d'",
    ]  # fmt: skip
    assert "is also the object holding field 'a.b'" in problems[1]
    assert problems[0].endswith("mappings.'public.t'.rename: {'_id': <name>}")
