"""verify's second look at the rows that differed: rows in flight are not divergence (``recheck``).

Part of verify (``sync.verify``), which re-exports it; docs/followers.md, "Rows in flight".
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from cdcsync.sync.sink import batched
from cdcsync.sync.verify.report import KIND_BYTE, KINDS, LISTED, TableReport
from cdcsync.sync.verify.spill import PARTS, Spill

PAUSES_S = (0.0, 1.0, 2.0, 4.0, 8.0)  # before each re-check of the differing rows (``recheck``)
SETTLED = 0.01  # a re-check wave of many ids that settles fewer than this share of them is the last


def recheck(
    report: TableReport,
    look: Callable[[Collection[str]], dict[str, tuple[bytes | None, bytes | None]]],
    pauses: Sequence[float] = PAUSES_S,
    differing: Spill | None = None,
    pace: float | None = None,
) -> None:
    """Look again at the differing ids after each pause; a row leaves the report once it agrees, or once its
    store copy changes between two looks (the follower is applying that row's changes: in flight, not stuck).

    The pass reads the source, then the store, over minutes: a row changed
    meanwhile differs without being divergent, and a follower needs a moment
    to apply a change (a Delta batch some seconds). A row that still
    differs, and whose store copy stayed as it was through every look, is
    reported in the kind its last look found (a stale row deleted at the
    source meanwhile is extra). ``differing`` holds every id the pass found
    (``compare``), so a pass under writes, where most rows moved, ends clean;
    without it only the listed ids are looked at, and those past ``LISTED``
    stay counted. The looks go in waves (``_waves``). ``pace``: rows a second
    looked up on each side at most.
    """
    with tempfile.TemporaryDirectory(prefix="cdcsync-recheck-") as tmp:
        if differing is None:
            unchecked = {kind: getattr(report, f"{kind}_count") - len(getattr(report, kind)) for kind in KINDS}
            ids = Spill(Path(tmp) / "listed")
            ids.add((ident, KIND_BYTE[kind]) for ident, kind in report.listed().items())
            ids.done()
        else:
            unchecked, ids = dict.fromkeys(KINDS, 0), differing
        left = None
        try:
            left = _waves(ids, look, pauses, pace, Path(tmp))
            if left is None:
                return  # the rows cannot be looked up: the pass's findings stand
            counts, still = dict(unchecked), {kind: list[str]() for kind in KINDS}
            for chunk in batched(_pairs(left), LISTED):
                for kind in KINDS:
                    now = [ident for ident, state in chunk if state[:1] == KIND_BYTE[kind]]
                    counts[kind] += len(now)
                    still[kind] = sorted(still[kind] + now)[:LISTED]
        finally:
            for spill in (ids, left):
                if spill is not None and spill is not differing:
                    spill.close()
    for kind in KINDS:
        setattr(report, f"{kind}_count", counts[kind])
        setattr(report, kind, still[kind])


def _waves(
    ids: Spill,
    look: Callable[[Collection[str]], dict[str, tuple[bytes | None, bytes | None]]],
    pauses: Sequence[float],
    pace: float | None,
    tmp: Path,
) -> Spill | None:
    """``recheck``'s looks: one wave per pause, each looking at every id the last left, ``LISTED`` at a time.

    An id's state is its kind's byte, then (after its first look) its first store copy: ``\\x00`` for none,
    ``\\x01`` and the digest. Each wave writes the ids still differing to a spill of its own. A wave starts
    once its pause has passed since the last ended, so the pauses cost once however many ids there are. A
    wave after the first, of more than ``LISTED`` ids, that settled fewer than ``SETTLED`` of them ends the
    looks: that is divergence (a store emptied, say), and looking again would only take time. Returns the last wave's
    spill (``ids`` when there were no pauses), or None when the ids cannot be looked up.
    """
    current, ended = ids, None
    try:
        for n, pause in enumerate(pauses):
            time.sleep(max(0.0, pause - (time.monotonic() - ended)) if ended is not None else pause)
            wave = Spill(tmp / f"wave{n}")
            seen = kept = 0
            try:
                for chunk in batched(_pairs(current), LISTED):
                    started = time.monotonic()
                    last = look([ident for ident, _state in chunk])
                    if not last:
                        wave.close()
                        if current is not ids:
                            current.close()
                        return None
                    stays = []
                    for ident, state in chunk:
                        there, held = last[ident]
                        copy = b"\x00" if held is None else b"\x01" + held
                        if there == held or (len(state) > 1 and state[1:] != copy):
                            continue
                        stays.append((ident, KIND_BYTE[_kind(there, held)] + (state[1:] if len(state) > 1 else copy)))
                    wave.add(stays)
                    seen, kept = seen + len(chunk), kept + len(stays)
                    if pace is not None:
                        time.sleep(max(0.0, len(chunk) / pace - (time.monotonic() - started)))
                wave.done()
            except BaseException:
                wave.close()
                raise
            if current is not ids:
                current.close()
            current, ended = wave, time.monotonic()
            if not kept or (n and seen > LISTED and seen - kept < SETTLED * seen):
                break
        return current
    except BaseException:
        if current is not ids:
            current.close()
        raise


def _pairs(spill: Spill) -> Iterator[tuple[str, bytes]]:
    return (pair for part in range(PARTS) for pair in spill.read(part))


def _kind(there: bytes | None, held: bytes | None) -> str:
    return "missing" if held is None else "extra" if there is None else "stale"
