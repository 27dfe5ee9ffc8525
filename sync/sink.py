"""The sink contract: what a follower needs from a derived store.

A sink receives batches of changes that are already reduced to the last change
per key (``sync.chunks.last_per_key``) and mapped (``sync.mapping``). It
must uphold, on its own server and for every key:

- **Apply rule**: write a change only if its version is higher than the
  version the store holds for that key (a live row's or a delete marker's).
  The same version again is a no-op; a lower one is skipped and counted as
  ``older``. At-least-once delivery + this rule = effectively once.
- **Deletes leave a marker** holding the delete's version, kept at least as
  long as a replay can still bring an older write of the key (the source's
  compaction horizon; until the store is rebuilt, for a sink that cannot purge
  them): a replayed older write must not resurrect the row. Readers never see
  markers. A sink class that can remove the older ones declares the
  ``MarkerPurge`` role (``purge_markers(target, horizon_s)``,
  ``sync.marker_purge``).
- **Idempotent batches**: ``write`` may be called again with the same batch
  after a crash; the result on the store is the same.
- **One bad row never stops the batch**: a row the server rejects for a
  reason about that row alone (mapping conflict, oversized value) is returned
  in ``rejected`` with the server's reason and goes to the dead-letter topic;
  the rest is written.
- **Only listed errors reject a row.** A rejected row's offset commits, so a
  wrong rejection loses the change silently. Each sink's module docstring
  lists, in a table, the errors it rejects a row for (summed up below); every
  other error, one the sink has never seen included, stops the batch:
  ``RetryableError`` for trouble that passes (Elasticsearch 429, Redis BUSY
  or MISCONF, a Delta commit conflict; nothing is acknowledged and the
  follower retries the whole batch with back-off, then stops with
  ``FatalError``), ``FatalError`` for what needs a person, its message naming
  the sink, the server's error and the fix. In doubt: retry, then stop;
  never reject.

  =============  ==============================================================
  sink           rejects a row for (every other error stops the batch)
  =============  ==============================================================
  elasticsearch  ``mapper_parsing``, ``document_parsing``,
                 ``strict_dynamic_mapping`` exceptions; an
                 ``illegal_argument_exception`` about a field or mapping; a
                 document with no JSON form, a reserved field, an id over 512
                 bytes, or alone over ``http.max_content_length``. A version
                 conflict is ``older``, a closed index retried
  redis          ``WRONGTYPE``; the apply script failing on the row alone; a
                 column named ``_v``, text with no UTF-8 form
  delta          a value that does not fit its column's type (checked before
                 the MERGE)
  =============  ==============================================================

**Roles.** A sink plays each of three roles, each a small ``Protocol``:
``Writer`` (applies batches under the apply rule: the follower's side),
``Reader`` (the live rows as ``verify`` reads them) and ``Staging`` (a
bootstrap's or reindex's generations: stage, fill, publish); ``Sink`` is all
three. Roles only some stores can play (``MarkerPurge``, ``Digesting``) are
extra. A sink class lists the roles it plays among its bases, so mypy checks
that it implements them, and what it can do is read from that declaration
(``declares``), never guessed from the members it happens to have.

Members the follower calls, in order: ``open(mappings)`` once,
``write(batch_id, rows)`` per micro-batch, ``close()`` at shutdown; ``verify``
calls ``scan(target)``, ``lookup(target, ids)`` and ``stored_form(doc)``. A sink
that can digest its rows where they are stored is also ``Digesting``, and
``verify`` reads those digests instead of the rows, or compares sums of ranges
of them first (``sync.verify.ranges``).

**Generations** (bootstrap and reindex, ``snapshot/``): ``stage(mappings)``
instead of ``open`` builds a new generation of each target that readers cannot
see (``Generations``), and
``write``/``held`` of that sink instance use it; ``publish()`` switches
readers to it and drops the previous one. A stage that was never published
(a killed run) is removed by the next ``stage``, so a killed bootstrap or
reindex leaves nothing partial in front of readers and is simply run again.
How atomic the switch is depends on the server; each sink's docstring says.

=========================  ============================================================
member                     contract
=========================  ============================================================
``name``                   the follower's name, for logs and metrics
``chunk_rows``             records per ``write`` call: the follower parses the next chunk while
                           one is written (``None``: the whole batch in one call)
``writers``                ``write`` calls a follower (chunks of one batch) may make at once, from
                           as many threads: more than 1 only when the apply rule does not depend
                           on the order of writes (1: they must not overlap)
``holds_objects``          a row's fields may be objects and arrays of them, stored as they are
                           (Elasticsearch); otherwise a document of related tables is stored as
                           one JSON text (``sync.documents.follower.stored``)
``fill_order_free``        a bootstrap's or reindex's fill of its staged generations may be split over
                           several processes writing in any order (``snapshot.parallel``)
``take_over(staged, m)``   write where another process's staged generations are (``Generations.plain``)
``fill_writers``           the same for a bootstrap or reindex filling a staged generation: one process
                           on the driver, the store's only writer (1 where ``writers`` is 1)
``open(mappings)``         connect, create what is missing (index + alias, script, table)
``write(batch_id, rows)``  apply a batch of ``Row``; return a ``WriteResult``
``make_visible(targets)``  show readers what was written to ``targets`` now (once per batch)
``held(target)``           every live row the store holds: ``{id: (version, doc)}``
``stored_form(doc)``       a canonical document as ``held`` would return it
``stage(mappings)``        drop an unpublished earlier stage, create a fresh store per target,
                           invisible to readers; ``write``/``held`` use it from then on
``publish()``              switch readers to the staged generations, drop the previous ones; ``write``
                           goes to the live store again
``close()``                release connections
=========================  ============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from cdcsync.sync.mapping import Row, TableMapping

T = TypeVar("T")


@dataclass
class WriteResult:
    applied: int = 0
    older: int = 0  # older than (or equal to) what the store holds: skipped
    rejected: list[tuple[Row, str]] = field(default_factory=list)  # (row, the server's reason)

    def merge(self, other: WriteResult) -> WriteResult:
        return WriteResult(self.applied + other.applied, self.older + other.older, self.rejected + other.rejected)


class Generations:
    """A sink's staged targets: where each target's writes and reads go until ``publish`` makes them live.

    Every sink stages the same way (``Sink.stage``): a new generation of each
    target, invisible to readers, filled, then published. What a generation is
    differs: an Elasticsearch index ``<alias>-NNNNNN``, a Redis key space
    ``<prefix>~<time>``, a Delta table ``<path>/<target>__staging``. This holds
    which targets are staged and where, for all three (``Sink.generations``), and
    carries it to another process (``plain``, and back with the constructor: a
    bootstrap's or reindex's other writers, ``snapshot.parallel``).
    """

    def __init__(self, staged: Mapping[str, str] | None = None) -> None:
        self._staged: dict[str, str] = dict(staged or {})  # target -> its staged generation's name

    def stage(self, target: str, where: str) -> None:
        self._staged[target] = where

    def where(self, target: str, live: str) -> str:
        """The staged generation of ``target``, or ``live`` when it is not staged."""
        return self._staged.get(target, live)

    def published(self, target: str) -> None:
        """``target`` is live again (published, or its stage dropped)."""
        self._staged.pop(target, None)

    def clear(self) -> None:
        self._staged.clear()

    def __contains__(self, target: object) -> bool:
        return target in self._staged

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._staged))

    def __len__(self) -> int:
        return len(self._staged)

    def items(self) -> list[tuple[str, str]]:
        return sorted(self._staged.items())

    def plain(self) -> dict[str, str]:
        """As plain data another process takes, and gives back to the constructor (``snapshot.parallel``)."""
        return dict(self._staged)


class Writer(Protocol):
    """Applies batches of last-per-key rows under the apply rule: what a follower asks of its store."""

    name: str
    order_free: bool  # its apply rule does not depend on the order of writes (sync.sinks)
    holds_objects: bool  # fields may be nested objects and arrays, stored as they are (documents)
    needs_spark: bool
    chunk_rows: int | None
    writers: int

    def open(self, mappings: Sequence[TableMapping]) -> None: ...

    def learn(self, mapping: TableMapping) -> None:
        """The table gained columns (``mapping`` is its new shape): take their types before rows bring them."""
        ...

    def forget(self, target: str, fields: Sequence[str]) -> None:
        """The table lost these columns (DROP COLUMN): remove the fields from every row of ``target``.

        Done before any row written after this call; versions stay as they are, so the apply rule still
        orders every later change (and a replayed older one is still refused).
        """
        ...

    def settle(self) -> None:
        """Carry out now what ``learn`` and ``forget`` left for the next write; only while nothing writes."""
        ...

    def write(self, batch_id: int, rows: list[Row]) -> WriteResult: ...

    def make_visible(self, targets: Sequence[str]) -> None:
        """Show readers what was written to ``targets`` so far, now: called once per batch, after its writes."""
        ...

    def close(self) -> None: ...


class Reader(Protocol):
    """The live rows of a target in their stored form, markers hidden: what ``verify`` and ``repair`` read."""

    def scan(self, target: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Every live row of ``target``, a page at a time: ``(id, version, doc in stored form)``."""
        ...

    def lookup(self, target: str, ids: Iterable[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The live rows of ``ids`` that ``target`` holds, as ``scan`` gives them, read now (not at a point in time):
        ``verify`` re-checks a row that moved during its pass, and ``repair`` waits for the rows it asked for."""
        ...

    def held(self, target: str) -> dict[str, tuple[int, dict[str, Any]]]:
        """``scan`` as one dict, ``{id: (version, doc)}``: for a small target (tests, tools)."""
        ...

    def stored_form(self, doc: dict[str, Any]) -> dict[str, Any]: ...


class Staging(Protocol):
    """A new generation of each target, invisible to readers, filled, then published: a bootstrap or reindex."""

    fill_writers: int
    fill_order_free: bool
    generations: Generations  # its staged targets, until publish; another process may take them over

    def stage(self, mappings: Sequence[TableMapping]) -> None: ...

    def take_over(self, staged: Mapping[str, str], mappings: Sequence[TableMapping]) -> None:
        """Write to the staged generations another process of a fill made (``snapshot.parallel``)."""
        ...

    def publish(self) -> None: ...


class Sink(Writer, Reader, Staging, Protocol):
    """A derived store: every role a follower, ``verify`` and a bootstrap or reindex ask of it."""


@dataclass
class Purged:
    """One purge pass over a target: markers removed, markers stamped with a time, and those changed meanwhile."""

    purged: int = 0
    stamped: int = 0
    changed: int = 0  # written again since the pass found them (a newer version): left to that write

    def __add__(self, other: Purged) -> Purged:
        return Purged(self.purged + other.purged, self.stamped + other.stamped, self.changed + other.changed)


class MarkerPurge(Protocol):
    """Removes delete markers that no replay can need any more (``sync.marker_purge``)."""

    def purge_markers(self, target: str, horizon_s: float, now: float | None = None) -> Purged:
        """Remove the markers of ``target`` written more than ``horizon_s`` before ``now`` (default: the time)."""
        ...


def declares(sink_class: type, role: type) -> bool:
    """Whether ``sink_class`` declares that it plays ``role`` (lists it among its bases)."""
    return role in sink_class.__mro__


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of at most ``size`` items (``itertools.batched`` from Python 3.12): bounded requests over any number."""
    rest = iter(items)
    while batch := list(islice(rest, size)):
        yield batch


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{host}"))


@runtime_checkable
class Digesting(Protocol):
    """A sink that digests its rows where they are read (Delta: on Spark's executors), and sums them by
    ranges of keys there (``sync.verify.ranges``)."""

    def digests(
        self, target: str, digest: Callable[[dict[str, Any]], bytes], where: str | None = None
    ) -> Iterator[tuple[str, bytes]]:
        """Every live row of ``target`` as ``(id, digest(doc in stored form))``: ``scan``'s rows, digested;
        ``where``: only those its Spark SQL condition holds for.

        ``digest`` must pickle by reference (a module's function): it runs in other processes.
        """
        ...

    def kinds(self, target: str) -> dict[str, str | None]:
        """The target's data columns and the kind each holds."""
        ...

    def sums(self, target: str, bucket: str, hashed: str, aggregates: Sequence[str]) -> list[tuple[Any, ...]]:
        """The live rows grouped by Spark SQL ``bucket`` (named ``b``, ``hashed`` named ``h``): ``(b, *aggregates)``."""
        ...
