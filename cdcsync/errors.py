"""The two error roots every part of cdcsync maps its failures onto.

Callers decide from the root alone: a ``RetryableError`` is worth another try
after ``retry_after`` seconds (a broker leader moving, Elasticsearch 429);
a ``FatalError`` needs a person (bad config, missing privilege), and its
message says what is wrong and how to fix it.
"""

from __future__ import annotations


class CdcsyncError(Exception):
    """Base of every error cdcsync raises on purpose."""


class RetryableError(CdcsyncError):
    """A transient failure: the same call may succeed later."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class FatalError(CdcsyncError):
    """A failure that retrying will not fix."""


class ConfigError(FatalError):
    """The configuration is invalid; each problem names its field path and where the value came from."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


class PreflightError(FatalError):
    """A source or Kafka Connect is not ready for capture; each problem says how to fix it."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("pre-flight checks failed:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems
