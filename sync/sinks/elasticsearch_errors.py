"""How the Elasticsearch sink takes an error: the statuses and types, ``classify_item``, and the two error roots.

The Elasticsearch sink's module docstring has the table. Only REJECTED_TYPES
(and an ``illegal_argument_exception`` about a field or mapping) are about one
document; every other answer stops the batch, and an answer not listed anywhere
is retried, then stops the follower (``Follower.max_attempts``): never a dead letter.
A failure of a whole request is taken by ``root``.
"""

from __future__ import annotations

import re
from typing import Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import ApiError

from cdcsync.errors import FatalError, RetryableError

# Server trouble that passes: a retry of the whole batch can succeed.
RETRYABLE_STATUS = {429, 502, 503, 504}
RETRYABLE_TYPES = {"es_rejected_execution_exception", "circuit_breaking_exception", "cluster_block_exception"}
# How a bulk item's error is taken (``classify_item``; the table in sinks/elasticsearch.py's docstring).
# Only these are about the one document: the same document fails again, the others do not. Everything
# else stops the batch.
REJECTED_TYPES = frozenset(
    {"mapper_parsing_exception", "document_parsing_exception", "strict_dynamic_mapping_exception"}
)
# ES also uses illegal_argument_exception for requests and aliases ("no write index is defined for alias"):
# it rejects a row only when its reason is about the document's fields, terms or mapping.
ROW_ARGUMENT = re.compile(r"field|mapper|mapping|immense term", re.IGNORECASE)
FATAL_ITEM_TYPES = frozenset({"index_not_found_exception", "security_exception"})


def classify_item(status: int, error: dict[str, Any] | None) -> str:
    """How one bulk item's answer is taken (the table in sinks/elasticsearch.py's docstring).

    One of 'applied', 'older', 'reject', 'retry', 'closed', 'fatal' or
    'unknown' (retried too, then the follower stops: never a rejection).
    """
    if error is None:
        return "applied"
    kind = error.get("type")
    if status == 409 and kind == "version_conflict_engine_exception":
        return "older"
    if kind == "index_closed_exception":
        return "closed"
    if status in RETRYABLE_STATUS or kind in RETRYABLE_TYPES:
        return "retry"
    if kind in FATAL_ITEM_TYPES:
        return "fatal"
    if kind in REJECTED_TYPES:
        return "reject"
    if kind == "illegal_argument_exception" and ROW_ARGUMENT.search(str(error.get("reason", ""))):
        return "reject"
    return "unknown"


def error_type(body: Any) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("type") if isinstance(error, dict) else None


def reason(error: dict[str, Any]) -> str:
    text = f"{error.get('type')}: {error.get('reason')}"
    cause = error.get("caused_by")
    return f"{text} (caused by {cause.get('type')}: {cause.get('reason')})" if isinstance(cause, dict) else text


class TooLarge(Exception):
    """HTTP 413: the bulk body exceeds the server's http.max_content_length."""


def root(err: Exception, what: str, url: str) -> Exception | None:
    """A client failure met during ``what`` as one of the two error roots (``cdcsync.errors.mapped``)."""
    if isinstance(err, TlsError):
        return FatalError(f"elasticsearch {url}: TLS failed ({err}); check the URL scheme and CA")
    if isinstance(err, TransportConnectionError | ConnectionTimeout):
        return RetryableError(f"elasticsearch {url} unreachable during {what}: {err}")
    if not isinstance(err, ApiError):
        return None
    status = err.meta.status
    if status == 413:
        return TooLarge()
    if status in RETRYABLE_STATUS or error_type(err.body) in RETRYABLE_TYPES:
        return RetryableError(f"elasticsearch {url} refused {what} ({status}): {err}")
    return FatalError(f"elasticsearch {url}: {what} failed ({status}): {err}")
