"""A sink's staged targets: where each target's writes and reads go until ``publish`` makes them live.

Every sink stages the same way (``Sink.stage``): a new generation of each
target, invisible to readers, filled, then published. What a generation is
differs: an Elasticsearch index ``<alias>-NNNNNN``, a Redis key space
``<prefix>~<time>``, a Delta table ``<path>/<target>__staging``. This holds
which targets are staged and where, for all three, and carries it to another
process (``plain``, and back with the constructor: a bootstrap's or reindex's other
writers, ``snapshot.parallel``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class Generations:
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
        """As plain data another process takes (``Sink.generation``)."""
        return dict(self._staged)
