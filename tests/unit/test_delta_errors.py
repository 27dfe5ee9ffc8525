"""How the Delta sink classifies Spark failures: commit conflicts are retryable, the rest fatal."""

from __future__ import annotations

import pytest

from cdcsync.errors import FatalError, RetryableError, mapped


def test_commit_conflicts_are_retryable_other_failures_fatal() -> None:
    from cdcsync.sync.sinks.delta import DeltaSink

    # The text of the Py4JJavaError a real concurrent MERGE raised on this stack (Delta 4.0).
    conflict = (
        "An error occurred while calling o263.execute.\n: io.delta.exceptions.ConcurrentAppendException: "
        "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added to the root of the table"
    )
    with pytest.raises(RetryableError, match="Delta commit conflict"), mapped("merging", DeltaSink._mapped):
        raise RuntimeError(conflict)
    with pytest.raises(FatalError, match="merging failed"), mapped("merging", DeltaSink._mapped):
        raise RuntimeError("java.io.IOException: No space left on device")
    with pytest.raises(FatalError, match="^refused$"), mapped("merging", DeltaSink._mapped):
        raise FatalError("refused")  # an error of cdcsync's own passes as it is
