"""The Elasticsearch sink's generations: the indexes ``PT-NNNNNN`` behind a target's alias ``PT``, staged and published.

``P`` is the sink's ``index_prefix`` and ``T`` a target (the sink's module docstring has the layout). ``stage``
deletes every ``PT-NNNNNN`` the alias does not point to (an earlier stage never published) and creates the next
number (``next_generation``), with the settings and mappings configured now, without the alias: readers cannot
see it, and this sink instance writes and reads it by its concrete name. Nobody searches it, so it is filled the
way a bulk load is: with ``refresh_interval: -1`` (no refresh, no segment per second to merge later). ``publish``
puts the index's own ``refresh_interval`` back and reads it back (a staged index left without refreshes is
refused), refreshes it (so the first search after the switch sees all of it), then moves the alias, filter and
write flag included, in ONE ``_aliases`` request for every staged target (``swap_aliases``): a reader resolves an
alias to the old index or to the new one, never to none or both, and sees all targets switch together. After
``DROP_GRACE_S`` (requests that resolved an alias just before the swap finish on the old index), waited once per
publish and not once per target (``python -m bench.publish``), the old indexes are deleted (``drop_old``). A new
follower has no alias until its first publish.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from elasticsearch import Elasticsearch

from cdcsync.errors import Errors, FatalError, RetryableError
from cdcsync.sync.sinks.elasticsearch_markers import HIDE_MARKERS

FIRST_GENERATION = "000001"
DROP_GRACE_S = 3.0  # publish: how long requests that resolved the alias to the old index get to finish
NAMES_PER_REQUEST = 2000  # characters of index names per delete: the request line stays under ES's 4 KB


def next_generation(client: Elasticsearch, alias: str) -> str:
    """The name of the alias's next generation, once the generations an earlier stage left are deleted."""
    if client.indices.exists(index=alias) and not client.indices.exists_alias(name=alias):
        raise FatalError(f"{alias} is a concrete index, not an alias (auto-created?); delete it and reindex")
    generations, live = numbered(client, alias), behind(client, alias)
    for leftover in sorted(set(generations) - set(live)):  # an earlier stage that was never published
        client.indices.delete(index=leftover)
    return f"{alias}-{max(generations.values(), default=0) + 1:06d}"


def numbered(client: Elasticsearch, alias: str) -> dict[str, int]:
    """Every generation's index of the alias's layout, ``<alias>-NNNNNN`` -> N (other targets' never match)."""
    found = client.indices.get(index=f"{alias}-*", expand_wildcards="open,closed", allow_no_indices=True)
    pattern = re.compile(re.escape(alias) + r"-(\d{6})")
    return {name: int(m.group(1)) for name in found if (m := pattern.fullmatch(name))}


def behind(client: Elasticsearch, alias: str) -> list[str]:
    """The indexes the alias points to (none: no alias yet)."""
    if not client.indices.exists_alias(name=alias):
        return []
    return sorted(client.indices.get_alias(name=alias))


def swap_aliases(client: Elasticsearch, staged: Mapping[str, tuple[str, str | None]], errors: Errors) -> list[str]:
    """Make each staged index ready and move its alias to it, all in one request; the indexes the aliases left.

    ``staged``: alias -> (its staged index, the refresh interval that index is to have).
    """
    for generation, refresh_interval in staged.values():
        with errors(f"publish {generation}"):
            ready(client, generation, refresh_interval)
    actions: list[dict[str, Any]] = []
    old: list[str] = []
    for alias, (generation, _) in staged.items():
        with errors(f"publish {generation}"):
            left = [index for index in behind(client, alias) if index != generation]
        actions += [{"remove": {"index": index, "alias": alias}} for index in left]
        shown = {"index": generation, "alias": alias, "is_write_index": True, "filter": HIDE_MARKERS}
        actions.append({"add": shown})
        old += left
    names = ", ".join(generation for generation, _ in staged.values())
    with errors(f"publish {names}"):
        client.indices.update_aliases(actions=actions)  # atomic for readers
    return old


def ready(client: Elasticsearch, index: str, wanted: str | None) -> None:
    """Put a staged index's own refresh interval back, check it, and refresh it (module docstring)."""
    client.indices.put_settings(index=index, settings={"index": {"refresh_interval": wanted}})
    now = client.indices.get_settings(index=index, name="index.refresh_interval", flat_settings=True)
    found = now.get(index, {}).get("settings", {}).get("index.refresh_interval")  # none listed: the default
    if found != wanted:  # None on both sides: the server's default
        raise RetryableError(f"{index}: refresh_interval is {found!r} after restoring it to {wanted!r}")
    client.indices.refresh(index=index)


def drop_old(client: Elasticsearch, old: Sequence[str], errors: Errors) -> None:
    """Delete the indexes a publish moved the aliases from, after ``DROP_GRACE_S``."""
    if old:
        time.sleep(DROP_GRACE_S)
        for chunk in _name_lists(old):
            with errors(f"dropping {chunk}"):
                client.indices.delete(index=chunk)


def _name_lists(names: Sequence[str]) -> Iterator[str]:
    """``names`` as comma-separated lists of at most ~NAMES_PER_REQUEST characters each."""
    chunk: list[str] = []
    size = -1  # the joined length: a comma before each name but the first
    for name in names:
        if chunk and size + 1 + len(name) > NAMES_PER_REQUEST:
            yield ",".join(chunk)
            chunk, size = [], -1
        chunk.append(name)
        size += 1 + len(name)
    if chunk:
        yield ",".join(chunk)
