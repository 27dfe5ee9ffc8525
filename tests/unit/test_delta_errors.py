"""How the Delta sink classifies Spark failures: commit conflicts are retryable, the rest fatal."""

from __future__ import annotations

import pytest

from cdcsync.errors import FatalError, RetryableError


def test_commit_conflicts_are_retryable_other_failures_fatal() -> None:
    from cdcsync.sync.sinks.delta import _spark_errors

    # The text of the Py4JJavaError a real concurrent MERGE raised on this stack (Delta 4.0).
    conflict = (
        "An error occurred while calling o263.execute.\n: io.delta.exceptions.ConcurrentAppendException: "
        "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added to the root of the table"
    )
    with pytest.raises(RetryableError, match="Delta commit conflict"), _spark_errors("merging"):
        raise RuntimeError(conflict)
    with pytest.raises(FatalError, match="merging failed"), _spark_errors("merging"):
        raise RuntimeError("java.io.IOException: No space left on device")
