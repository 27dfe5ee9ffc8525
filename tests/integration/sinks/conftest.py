"""Fixtures the sink tests share: an Elasticsearch client, and an index prefix removed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from elasticsearch import Elasticsearch

from tests.support import ENV, uid


@pytest.fixture
def es() -> Iterator[Elasticsearch]:
    client = Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}", request_timeout=30)
    yield client
    client.close()


@pytest.fixture
def prefix(es: Elasticsearch) -> Iterator[str]:
    """A test's own index prefix; its indexes are deleted afterwards."""
    prefix = f"cdcsync-test-{uid()}-"
    yield prefix
    names = list(es.indices.get(index=f"{prefix}*"))  # by name: destructive wildcard deletes are refused
    if names:
        es.indices.delete(index=",".join(names))
