"""The two error roots every part of cdcsync maps its failures onto.

Callers decide from the root alone: a ``RetryableError`` is worth another try
after ``retry_after`` seconds (a broker leader moving, Elasticsearch 429);
a ``FatalError`` needs a person (bad config, missing privilege), and its
message says what is wrong and how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager


class CdcsyncError(Exception):
    """Base of every error cdcsync raises on purpose."""


class RetryableError(CdcsyncError):
    """A transient failure: the same call may succeed later."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class FatalError(CdcsyncError):
    """A failure that retrying will not fix."""


class TableError(RetryableError):
    """A sink's write failed for ``target``'s rows alone; ``fix`` says what a person does about it.

    Retried like any ``RetryableError``; once the follower's attempts are
    spent, that table is held alone and the others go on (``sync.held``).
    """

    def __init__(self, target: str, message: str, fix: str, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after)
        self.target, self.fix = target, fix

    def __reduce__(self) -> tuple[type, tuple[str, str, str, float]]:  # kept whole across processes
        return (type(self), (self.target, str(self), self.fix, self.retry_after))


# How one kind of client's failure is taken: ``rule(err, what)`` is the RetryableError or FatalError that
# ``err``, met while doing ``what``, is; or None for a failure the rule does not know (it stays as it is).
ErrorRule = Callable[[Exception, str], Exception | None]
# A sink's ``_errors``: ``with errors(what):`` raises a failure of the block as the sink's rule makes it (``mapped``).
Errors = Callable[[str], AbstractContextManager[None]]


@contextmanager
def mapped(what: str, rule: ErrorRule) -> Iterator[None]:
    """Run a block, raising a failure of it as what ``rule`` makes of it; an error of cdcsync's own passes.

    Each sink maps its client's failures this way: ``with self._errors(what):``
    around a call, where ``_errors`` is ``mapped(what, self._mapped)`` and
    ``_mapped`` is the sink's one rule. A failure that comes back as a value
    (a Redis reply) is raised inside such a block.
    """
    try:
        yield
    except CdcsyncError:
        raise
    except Exception as err:
        root = rule(err, what)
        if root is None:
            raise
        raise root from err


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


class PoisonRecord(ValueError):
    """A record that cannot become a change; the message is the reason put in the dead-letter headers."""
