"""The marker row of ``bench.freshness``: committed once a second, read back from each store as a reader would.

A marker's freshness is the time it was first seen minus its commit time; a
marker overwritten before a poll saw it counts as seen with the next one.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ENV

TARGET = "marks"  # the target every follower of the bench's table writes
POLL_S = 0.05


class Marks:
    """The markers committed so far: ``at[n]`` is when the commit of ``mark:<n>`` returned (monotonic)."""

    def __init__(self, pg: Any, table: str) -> None:
        self.pg, self.table = pg, table
        self.at: dict[int, float] = {0: time.monotonic()}
        self.lock = threading.Lock()

    def commit(self) -> int:
        n = max(self.at) + 1
        with self.lock:
            self.pg.execute(f"UPDATE {self.table} SET name = 'mark:{n}' WHERE id = 0")
            self.at[n] = time.monotonic()
        return n


class Poller:
    """Reads the marker row from one store every ``POLL_S``; ``delays[n]`` is marker n's commit -> seen."""

    def __init__(self, name: str, tag: str, marks: Marks) -> None:
        self.name, self.tag, self.marks = name, tag, marks
        self.seen = -1
        self.delays: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, tmp: Path) -> None:
        read = {"search": self._search, "cache": self._cache, "warehouse": self._warehouse(tmp / "warehouse")}
        self._thread = threading.Thread(target=self._loop, args=(read[self.name],), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, read: Any) -> None:
        while not self._stop.wait(POLL_S):
            try:
                n = read()
            except Exception:  # noqa: BLE001  (the store not there yet: the index, the table)
                continue
            if n is not None and n > self.seen:
                now = time.monotonic()
                for m in range(self.seen + 1, n + 1):
                    if m in self.marks.at:
                        self.delays[m] = now - self.marks.at[m]
                self.seen = n

    def _search(self) -> int | None:
        from elasticsearch import Elasticsearch

        es = getattr(self, "_es", None) or Elasticsearch(f"http://127.0.0.1:{ENV['ES_PORT']}")
        self._es = es
        doc = es.get(index=f"{self.tag}-{TARGET}", id="0", realtime=False, source_includes=["name"])
        return _mark(doc["_source"].get("name"))

    def _cache(self) -> int | None:
        import redis

        r = getattr(self, "_redis", None) or redis.Redis(port=int(ENV["REDIS_PORT"]))
        self._redis = r
        return _mark(r.hget(f"{self.tag}:{TARGET}:0", "name"))

    def _warehouse(self, path: Path) -> Any:
        """A reader of the Delta log: each new commit's added files, searched for id 0 (no Spark)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        log_dir, state = path / TARGET / "_delta_log", {"next": 0, "mark": -1}

        def read() -> int | None:
            while (entry := log_dir / f"{state['next']:020d}.json").exists():
                for line in entry.read_text().splitlines():
                    action = json.loads(line)
                    if "add" in action:
                        part = pq.read_table(path / TARGET / action["add"]["path"], columns=["_cdcsync_id", "name"])
                        names = part.filter(pc.equal(part["_cdcsync_id"], "0"))["name"].to_pylist()
                        # max: with deletion vectors a commit re-adds the old file too, old row and all
                        state["mark"] = max([m for m in map(_mark, names) if m is not None] + [state["mark"]])
                state["next"] += 1  # type: ignore[operator]
            return state["mark"] if state["mark"] >= 0 else None

        return read


def _mark(name: Any) -> int | None:
    if isinstance(name, bytes):
        name = name.decode()
    return int(name.split(":", 1)[1]) if isinstance(name, str) and name.startswith("mark:") else None
