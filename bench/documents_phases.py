"""The three phases of ``bench.documents``, the same for either tool: what is written and what is read back.

Everything is read from Elasticsearch as a search sees it (after a refresh):
counts by ``_count``, the marker lines by ``mget`` with ``realtime=false``.
Times are from the moment the writer's commit returned.

- **fill**: until the index counts every root (``_count`` every 0.5 s);
- **fan-out**: ``UPDATE products SET title = 'fan:<r>' WHERE sku = 'hot'``
  (the product of one line of each of ``FAN_OUT`` orders), then a nested
  ``_count`` of the documents showing it every 50 ms until all do; the next
  update a second after;
- **steady**: ``rate`` changes a second, in ten ticks a second: each tick
  updates the ``qty`` of one line of each of ``rate / 10 - 1`` orders (a
  window moving through the orders, so every change is in another document)
  and commits one marker, ``note = '<tool>:<n>'`` on the first line of one of
  ``MARKER_ORDERS`` orders in turn. A poller ``mget``s those orders every
  50 ms; a marker's freshness is the time it was first seen minus its
  commit time (one overwritten before a poll saw it counts as seen with the
  next one of its line). Documents/s: the changes / the time from the first
  commit until the last marker is visible. At a rate both tools keep up
  with, that is the rate offered, whatever either could do;
- **burst**: the same changes flat out (statements of 1,000 lines, one per
  order), then a marker: documents/s until it is visible, the capacity
  behind the steady phase's figure.

``PhaseRss`` samples the peak RSS of a process and its descendants
(``bench.common.PeakRss``) every half second, per phase.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench.common import PeakRss, say
from bench.documents_shop import FAN_OUT, LINES

MARKER_ORDERS = 10
POLL_S = 0.05


class PhaseRss:
    """Peak RSS (bytes, and its split into JVM and Python) of ``pid``'s process tree, per phase."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peaks: dict[str, dict[str, int]] = {}
        self._current: PeakRss | None = None
        self._name = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def phase(self, name: str) -> None:
        with self._lock:
            self._close()
            self._name, self._current = name, PeakRss(self.pid)
            self._current.sample()

    def _close(self) -> None:
        if self._current is not None:
            self.peaks[self._name] = {"total": self._current.peak, **self._current.parts}

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self._current is not None:
                    self._current.sample()

    def stop(self) -> dict[str, dict[str, int]]:
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._close()
            self._current = None
        return self.peaks


def fill(es: Any, index: str, roots: int, check: Callable[[], None], timeout_s: float) -> dict[str, Any]:
    """Seconds from now until ``index`` counts ``roots`` documents (and until it counted the first)."""
    started = time.monotonic()
    first: float | None = None
    last_say, count = started, 0
    while True:
        check()
        try:
            count = int(es.count(index=index)["count"])
        except Exception:  # noqa: BLE001  (the index not made yet)
            count = 0
        now = time.monotonic()
        if count and first is None:
            first = now - started
        if count >= roots:
            break
        if now - started > timeout_s:
            raise SystemExit(f"fill: {count:,} of {roots:,} documents in {index} after {timeout_s:.0f} s")
        if now - last_say >= 30:
            say(f"  {count:,} of {roots:,} documents after {now - started:.0f} s")
            last_say = now
        time.sleep(0.5)
    seconds = time.monotonic() - started
    return {
        "seconds": round(seconds, 1),
        "per_s": round(roots / seconds),
        "first_s": round(first or seconds, 1),
        # the rate once documents appear: the start-up (a JVM, a first query) left out
        "per_s_after_first": round(roots / max(seconds - (first or 0), 1e-3)),
    }


def fan_out(
    pg: Any, es: Any, schema: str, index: str, repeats: int, check: Callable[[], None], timeout_s: float
) -> dict[str, Any]:
    """``repeats`` updates of the product ``FAN_OUT`` documents hold: commit -> the last of them visible."""
    lasts: list[float] = []
    for r in range(repeats):
        value = f"fan:{r}:{time.time_ns()}"  # unique across runs of the phase, as a phrase of its own
        query = {"nested": {"path": "lines", "query": {"match_phrase": {"lines.product.title": value}}}}
        pg.execute(f"UPDATE {schema}.products SET title = %s WHERE sku = 'hot'", (value,))
        committed = time.monotonic()
        while True:
            check()
            if int(es.count(index=index, query=query)["count"]) >= FAN_OUT:
                break
            if time.monotonic() - committed > timeout_s:
                raise SystemExit(f"fan-out {r}: not in all {FAN_OUT} documents within {timeout_s:.0f} s")
            time.sleep(POLL_S)
        lasts.append(time.monotonic() - committed)
        say(f"  fan-out {r + 1}/{repeats}: the last of {FAN_OUT} documents after {lasts[-1]:.2f} s")
        time.sleep(1)
    ordered = sorted(lasts)
    return {
        "repeats": repeats,
        "documents": FAN_OUT,
        "per_s": round(FAN_OUT * repeats / sum(lasts)),
        "last_s_p50": round(ordered[len(ordered) // 2], 2),
        "last_s_max": round(ordered[-1], 2),
    }


class Markers:
    """The marker lines: ``commit()`` writes the next, a thread reads them back; ``delays[n]`` commit -> seen."""

    def __init__(self, pg: Any, es: Any, schema: str, index: str, roots: int, prefix: str) -> None:
        self.pg, self.es, self.schema, self.index = pg, es, schema, index
        self.prefix = f"{prefix}:"  # the tools share the tables: the markers of the one before are not these
        self.orders = [roots - i for i in range(MARKER_ORDERS)]  # the last orders: no fan-out product there
        self.at: dict[int, float] = {}
        self.delays: dict[int, float] = {}
        self.seen = {o: -1 for o in self.orders}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def line(self, order: int) -> int:
        return (order - 1) * LINES + 1

    def commit(self) -> int:
        n = len(self.at)
        order = self.orders[n % MARKER_ORDERS]
        self.pg.execute(f"UPDATE {self.schema}.order_lines SET note = %s WHERE id = %s",
                        (f"{self.prefix}{n}", self.line(order)))  # fmt: skip
        self.at[n] = time.monotonic()
        return n

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        ids = [str(o) for o in self.orders]
        while not self._stop.wait(POLL_S):
            try:
                docs = self.es.mget(index=self.index, ids=ids, realtime=False, source_includes=["lines"])["docs"]
            except Exception:  # noqa: BLE001  (a poll that failed: the next one reads the same)
                continue
            now = time.monotonic()
            for doc in docs:
                order = int(doc["_id"])
                lines = (doc.get("_source") or {}).get("lines") or []
                note = next((line.get("note") for line in lines if line.get("id") == self.line(order)), None)
                if not (isinstance(note, str) and note.startswith(self.prefix)):
                    continue
                n = int(note[len(self.prefix) :])
                if n not in self.at:  # seen before ``commit`` noted its time: counted at the next poll
                    continue
                for m in range(self.seen[order] + MARKER_ORDERS if self.seen[order] >= 0 else n % MARKER_ORDERS,
                               n + 1, MARKER_ORDERS):  # fmt: skip
                    if m in self.at and m not in self.delays:
                        self.delays[m] = now - self.at[m]
                self.seen[order] = max(self.seen[order], n)

    def visible(self, n: int) -> bool:
        return n in self.delays


def steady(
    pg: Any, markers: Markers, schema: str, roots: int, rate: int, seconds: float, check: Callable[[], None],
    drain_s: float,
) -> dict[str, Any]:  # fmt: skip
    """``rate`` changes a second for ``seconds``, then until the last marker is visible (at most ``drain_s``)."""
    per_tick = max(2, rate // 10)
    first_marker, written, low, tick, pass_ = len(markers.at), 0, 1, 0, 0
    started = time.monotonic()
    last = first_marker
    while time.monotonic() - started < seconds:
        high = min(low + per_tick - 2, roots)
        n = 1 + pass_ % LINES  # each pass through the orders updates their next line
        pg.execute(f"UPDATE {schema}.order_lines SET qty = qty + 1 WHERE id IN "
                   f"(SELECT (o - 1) * {LINES} + {n} FROM generate_series({low}, {high}) o)")  # fmt: skip
        written += high - low + 1
        last = markers.commit()
        written += 1
        if high >= roots:
            low, pass_ = 1, pass_ + 1
        else:
            low = high + 1
        tick += 1
        if tick % 100 == 0:
            check()
        time.sleep(max(0.0, started + tick * 0.1 - time.monotonic()))
    written_s = time.monotonic() - started
    deadline = time.monotonic() + drain_s
    while not markers.visible(last):
        check()
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    caught_up = markers.visible(last)
    total_s = time.monotonic() - started
    delays = sorted(d for m, d in markers.delays.items() if first_marker <= m <= last)
    out: dict[str, Any] = {
        "rate": rate,
        "seconds": round(written_s),
        "changes": written,
        "written_per_s": round(written / written_s),
        "markers": last - first_marker + 1,
        "markers_seen": len(delays),
        "caught_up": caught_up,
        # until the last marker is visible: if it never was, a bound (the tool is behind still)
        "per_s": round(written / total_s) if caught_up else None,
        "drain_s": round(total_s - written_s, 1),
    }
    for q in (50, 99):
        out[f"fresh_p{q}_s"] = round(delays[min(len(delays) - 1, len(delays) * q // 100)], 2) if delays else None
    out["fresh_max_s"] = round(delays[-1], 2) if delays else None
    return out


def burst(
    pg: Any, markers: Markers, schema: str, roots: int, changes: int, check: Callable[[], None], drain_s: float
) -> dict[str, Any]:
    """``changes`` line updates as fast as Postgres takes them, each in another order, then a marker."""
    started, done, low = time.monotonic(), 0, 1
    while done < changes:
        k = min(1000, changes - done, roots - low + 1)
        pg.execute(f"UPDATE {schema}.order_lines SET qty = qty + 1 WHERE id IN "
                   f"(SELECT (o - 1) * {LINES} + 2 FROM generate_series({low}, {low + k - 1}) o)")  # fmt: skip
        done, low = done + k, (low + k - 1) % roots + 1
    written_s = time.monotonic() - started
    last = markers.commit()  # after every change: visible means every change before it is in its document
    deadline = time.monotonic() + drain_s
    while not markers.visible(last):
        check()
        if time.monotonic() > deadline:
            raise SystemExit(f"burst: the marker after {changes:,} changes not visible within {drain_s:.0f} s")
        time.sleep(POLL_S)
    seconds = time.monotonic() - started
    return {
        "changes": changes,
        "written_per_s": round(changes / written_s),
        "seconds": round(seconds, 1),
        "per_s": round(changes / seconds),
    }
