"""The waits of cdcsync's retry policies, as tenacity wait strategies.

A ``RetryableError`` carries ``retry_after``: how long its server asked to be
left alone (Elasticsearch's 429, a Delta commit conflict). The retries of a
sink's write (``sync.follower``) and of a staged store's publish
(``snapshot.replay``) wait ``doubling_honouring_retry_after``: twice the wait
before, never less than what the error asks, never more than a cap.
"""

from __future__ import annotations

from tenacity import RetryCallState
from tenacity.wait import wait_base

from cdcsync.errors import RetryableError


def raised(state: RetryCallState) -> RetryableError:
    """The error the attempt raised, in a policy that retries ``RetryableError`` alone (its waits and callbacks)."""
    error = state.outcome.exception() if state.outcome is not None else None
    assert isinstance(error, RetryableError), error
    return error


class doubling_honouring_retry_after(wait_base):  # noqa: N801  (named like tenacity's own waits)
    """Each wait twice the one before (the first twice ``base``), at least the error's ``retry_after``, at most ``cap``.

    The wait before depends on every error's ``retry_after`` so far, so it is
    read back from the call's state: when tenacity asks for the next wait,
    ``upcoming_sleep`` still holds the one it slept last (0 before the first).
    """

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = base, cap

    def __call__(self, retry_state: RetryCallState) -> float:
        before = retry_state.upcoming_sleep or self.base
        return min(max(before * 2, raised(retry_state).retry_after), self.cap)
