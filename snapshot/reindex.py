"""Rebuild a streaming follower's store from the topics while the old store keeps serving.

The follower's daemon keeps streaming from its own checkpoint all along;
reindex never touches that checkpoint nor the bootstrap start file. It uses a
second sink instance of the follower (docs/reindex.md says why each step):

1. capture the end offsets E1 of the followed topics;
2. ``stage`` a new store (only ``--table``'s target if given) and fill it from
   each partition's start up to E1;
3. capture E1b and catch the staged generations up from E1 to E1b: the fill can
   take long, and this makes the window the next step covers a short one;
4. ``publish``: readers switch to the new store, the old one is dropped;
5. capture E2 after the switch and replay E1b..E2 into the live store. The
   daemon wrote those changes to the old store before the switch (or is
   writing them across it); the new store was built only up to E1b. Replaying
   them again where the daemon already wrote them is a no-op: versions.

A reindex of every table (no ``--table``) then records E2 as the offsets the
rebuilt store reflects (``sync.position.record_reindexed``): a follower
refused for a position past the compaction horizon resumes from there.

One bootstrap or reindex per follower at a time (``follower_lock``: a second
one is refused, exit 1, naming the running process).

Progress is recorded in ``<state>/reindex/<follower>.json`` (``state_file``),
written atomically at each step: ``staging`` before 2, ``publishing`` before
4 (with E1b), ``published`` after 4, ``done`` after 5. A reindex killed
anywhere leaves readers on a complete store: before 4 the old one, which the
daemon keeps up to date; from 4 on the new one, which lacks at most the
changes from E1b to the switch that the daemon wrote to the old store. The
next ``reindex`` of the follower reads the record (``unfinished``) and
finishes the killed run before its own: a run whose targets it rebuilds
anyway needs nothing more (its fill covers everything); otherwise a run
killed after 4 is caught up from its recorded E1b (step 5, and its
``record_reindexed``), and one killed during 4 is run again. Killed before 4,
readers never saw the staged generations and the next ``stage`` removes them.

The daemon does not wait for that next reindex: ``cdcsync run`` calls
``finish_killed`` each time it starts a follower, which catches up a run
killed after its switch, and refuses to start the follower (it stops alone,
naming the command) for one killed during its switch, where only running the
reindex again is known to be right. ``killed_line`` is what ``verify`` and
``status`` print while such a record exists.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import TopicPartition

from cdcsync.config import Config, FollowerConfig
from cdcsync.errors import ConfigError, FatalError
from cdcsync.snapshot.bootstrap import Busy, follower_lock
from cdcsync.snapshot.replay import Offsets, Progress, Summary, capture, offsets_json, publish, replay
from cdcsync.state import base_dir
from cdcsync.sync import reindex_needed
from cdcsync.sync.build import build_follower
from cdcsync.sync.catalog import mappings_for
from cdcsync.sync.mapping import TableMapping
from cdcsync.sync.position import record_reindexed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class ReindexSummary:
    follower: str
    targets: list[str]
    fill: Summary  # steps 2 and 3, into the staged generations
    catch_up: Summary  # step 5, into the live store
    published_at: float = 0.0  # unix time of the switch
    seconds: float = 0.0
    offsets: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # E1, E1b, E2
    finished: str | None = None  # what was done to finish a killed earlier run first, if anything

    def as_json(self) -> dict[str, Any]:
        return {
            "follower": self.follower,
            "targets": self.targets,
            "fill": {**self.fill.__dict__},
            "catch_up": {**self.catch_up.__dict__},
            "published_at": self.published_at,
            "seconds": self.seconds,
            "offsets": self.offsets,
            "finished": self.finished,
        }


def state_file(base: Path, follower: str) -> Path:
    """Where a reindex records its progress (module docstring)."""
    return base / "reindex" / f"{follower}.json"


def unfinished(config: Config, follower: str) -> dict[str, Any] | None:
    """The record of the follower's last reindex if it was killed before its end, else None.

    Keys: ``step`` (``staging``, ``publishing`` or ``published``), ``pid``,
    ``table`` (None: every table), ``topics``, ``targets``, ``started_at``,
    ``staged_to`` (E1b, once known). Only meaningful while no reindex of the
    follower runs: the caller holds its lock, or reports the record as a
    warning ("reindex killed at step ..., run it again").
    """
    path = state_file(base_dir(config), follower)
    if not path.exists():
        return None
    record: dict[str, Any] = json.loads(path.read_text())
    return None if record.get("step") == "done" else record


def killed_line(config: Config, follower: str) -> str | None:
    """One line on the follower's killed reindex, with what to run; None if there is none to finish."""
    killed = unfinished(config, follower)
    if killed is None or killed["step"] == "staging":
        return None  # killed before its switch: readers never saw the staged generations
    since = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(killed.get("updated_at") or killed["started_at"]))
    table = f" --table {killed['table']}" if killed.get("table") else ""
    if killed["step"] == "published":
        return (
            f"follower {follower}: a reindex{table} was killed after its switch ({since}): its new store lacks the "
            f"changes of the switch window until `cdcsync run` starts the follower or `cdcsync reindex {follower}` "
            "runs; either finishes it"
        )
    return (
        f"follower {follower}: a reindex{table} was killed during its switch ({since}): some targets may be "
        f"switched, others not; run `cdcsync reindex {follower}{table}` to finish it"
    )


def finish_killed(config: Config, follower: FollowerConfig, spark: SparkSession | None) -> str | None:
    """Finish a reindex of ``follower`` killed after its switch; refuse one killed during it. Called by ``cdcsync run``.

    None when there is nothing to finish: no record, the last reindex ended,
    one killed before its switch, or a reindex of the follower is running
    (it finishes the killed one itself). A run killed during its switch
    raises ``FatalError``: the daemon stops this follower alone and names
    the reindex to run.
    """
    if unfinished(config, follower.name) is None:
        return None
    try:
        with follower_lock(base_dir(config), follower.name, f"run {follower.name}: finishing a killed reindex"):
            killed = unfinished(config, follower.name)
            if killed is None or killed["step"] == "staging":
                return None
            if killed["step"] == "publishing":
                raise FatalError(str(killed_line(config, follower.name)))
            return _finish(config, follower, spark, killed, mappings_for(config, follower), None)
    except Busy:
        return None


def _record(config: Config, follower: str, record: dict[str, Any], step: str, **fields: Any) -> None:
    record.update(step=step, updated_at=time.time(), **fields)
    path = state_file(base_dir(config), follower)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def select(mappings: dict[str, TableMapping], follower: FollowerConfig, table: str | None) -> dict[str, TableMapping]:
    """The mappings to rebuild: all, or the one whose target or source table is ``table``."""
    if table is None:
        return mappings
    chosen = {topic: m for topic, m in mappings.items() if table in (m.target, m.table, m.table.split(".")[-1], topic)}
    if not chosen:
        known = ", ".join(sorted(m.target for m in mappings.values()))
        raise ConfigError([f"--table {table}: follower {follower.name} has no such target or table; targets: {known}"])
    return chosen


def reindex(
    config: Config,
    follower: FollowerConfig,
    spark: SparkSession | None,
    table: str | None = None,
    progress: Progress | None = None,
    origin: str = "topics",
) -> ReindexSummary:
    """Run steps 1-5 of the module docstring for ``follower`` (and ``table`` only, if given).

    Holds the follower's lock throughout, and first finishes an earlier
    reindex of the follower that was killed (module docstring). ``origin``
    "source": steps 1-3 are a read of the source database aligned with the log
    (``snapshot.source.fill_from_source``, needs ``spark``) instead of the
    topics: what a RENAME COLUMN or a column added with a DEFAULT needs
    (``sync.reindex_needed``), since the topics hold those rows in their old shape.
    """
    what = f"reindex {follower.name}" + (f" --table {table}" if table else "")
    with follower_lock(base_dir(config), follower.name, what):
        every = mappings_for(config, follower)
        mappings = select(every, follower, table)
        killed, finished = unfinished(config, follower.name), None
        if killed is not None and killed["step"] != "staging" and not set(killed["topics"]) <= set(mappings):
            finished = _finish(config, follower, spark, killed, every, progress)
        summary = _run(config, follower, spark, mappings, table, progress, origin)
        if killed is not None and finished is None:
            finished = (
                "the reindex killed before its switch had left readers on the old store: nothing to finish"
                if killed["step"] == "staging"
                else f"this run rebuilt the targets of the reindex killed at step {killed['step']}"
            )
        summary.finished = finished
        return summary


def _run(
    config: Config,
    follower: FollowerConfig,
    spark: SparkSession | None,
    mappings: dict[str, TableMapping],
    table: str | None,
    progress: Progress | None,
    origin: str = "topics",
) -> ReindexSummary:
    started = time.monotonic()
    running = build_follower(config, follower, spark, mappings=mappings, open_sink=False, fill=True)
    topics = sorted(mappings)
    summary = ReindexSummary(follower.name, sorted({m.target for m in mappings.values()}), Summary(follower.name),
                             Summary(follower.name))  # fmt: skip
    record = {"follower": follower.name, "pid": os.getpid(), "table": table, "topics": topics,
              "targets": summary.targets, "started_at": time.time(), "origin": origin}  # fmt: skip
    try:
        if origin == "source":
            from cdcsync.snapshot.source import fill_from_source

            if spark is None:
                raise FatalError(f"reindex {follower.name} --from source reads the source through Spark; none given")
            _record(config, follower.name, record, "staging")
            summary.fill = fill_from_source(config, follower, running, spark, progress=progress)
            e1 = e1b = {TopicPartition(t, int(p)): high for t, parts in summary.fill.offsets.items()
                        for p, high in parts.items()}  # fmt: skip
        else:
            marks = capture(config, topics)
            e1 = _high(marks)
            _record(config, follower.name, record, "staging")
            running.sink.stage(list(mappings.values()))
            replay(config, running, {tp: low for tp, (low, _) in marks.items()}, e1, summary.fill, progress)
            e1b = _high(capture(config, topics))
            replay(config, running, e1, e1b, summary.fill, progress)
        _record(config, follower.name, record, "publishing", staged_to=offsets_json(e1b))
        publish(running.sink)
        summary.published_at = time.time()
        _record(config, follower.name, record, "published", published_at=summary.published_at)
        e2 = _high(capture(config, topics))
        replay(config, running, e1b, e2, summary.catch_up, progress)
    finally:
        running.sink.close()
    summary.offsets = {"filled_to": offsets_json(e1), "staged_to": offsets_json(e1b), "caught_up_to": offsets_json(e2)}
    if table is None:
        record_reindexed(config, follower.name, summary.offsets["caught_up_to"])
    # From the source, rows in their old shape are read anew: nothing left to rebuild for these tables. From either,
    # the new indexes have the configured settings (an entry of origin "topics").
    reindex_needed.clear(config, follower.name, None if table is None else [m.table for m in mappings.values()], origin)
    reindex_needed.remember(config, follower.name, running.mappings.values())  # the shape the new store holds
    _record(config, follower.name, record, "done", caught_up_to=summary.offsets["caught_up_to"])
    summary.seconds = round(time.monotonic() - started, 2)
    return summary


def _finish(
    config: Config,
    follower: FollowerConfig,
    spark: SparkSession | None,
    killed: dict[str, Any],
    every: dict[str, TableMapping],
    progress: Progress | None,
) -> str:
    """Finish a reindex killed during or after its publish whose targets this run does not rebuild."""
    if killed["step"] == "publishing":  # some targets may be switched, others not: run it again
        _run(config, follower, spark, select(every, follower, killed["table"]), killed["table"], progress)
        return f"ran again the reindex killed at step {killed['step']}"
    step = killed["step"]  # _record below marks the record done
    mappings = {topic: m for topic, m in every.items() if topic in killed["topics"]}
    running = build_follower(config, follower, spark, mappings=mappings)  # the live store, as step 5
    caught_up = Summary(follower.name)
    try:
        starts = {TopicPartition(t, int(p)): o for t, parts in killed["staged_to"].items() for p, o in parts.items()}
        e2 = _high(capture(config, sorted(mappings)))
        replay(config, running, starts, e2, caught_up, progress)
    finally:
        running.sink.close()
    if killed["table"] is None:
        record_reindexed(config, follower.name, offsets_json(e2))
    _record(config, follower.name, killed, "done", caught_up_to=offsets_json(e2))
    return f"caught up the reindex killed at step {step}: {caught_up.records:,} records"


def _high(marks: dict[TopicPartition, tuple[int, int]]) -> Offsets:
    return {tp: high for tp, (_low, high) in marks.items()}
