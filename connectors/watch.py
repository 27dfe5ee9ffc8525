"""The capture watchdog: notices a connector that stopped producing, heals what the evidence supports.

Kafka Connect says RUNNING for a task that produces nothing, and never
restarts a FAILED task by itself (docs/daemon.md). The daemon runs this
watchdog beside its followers; per source, every ``WATCH_S``:

- **FAILED** connector or task: restart it (``POST …/restart?includeTasks=true
  &onlyFailed=true``), with a back-off that doubles per restart in a row
  (``RESTART_FIRST_S`` … ``RESTART_CAP_S``), in the manner of Strimzi's
  ``autoRestart``. A cause that has passed (Postgres back from crash recovery)
  is healed by the first restart after it.
- **RUNNING but silent**: Debezium writes a heartbeat every
  ``heartbeat_interval_ms`` even when the source is idle, so a heartbeat
  topic whose end offset has not moved for ``stall_after_s`` means capture is
  stuck, not idle. For Postgres the usual cause is a replication connection
  that outlived its task (a broker restart Connect could not stop it through)
  and keeps the slot: the watchdog ends the backend holding the slot
  (``pg_terminate_backend``, allowed to the slot's own role), then restarts
  the connector and its tasks. For MariaDB it restarts them.
- **Went back in time**: every minute, the database's log position against
  the offset Connect committed for the connector (``connectors.restore``). A
  database restored from a backup is behind it; nothing can heal that, and
  the problem names the repair.
- **FAILED on an error no restart fixes** (``unrecoverable``: Debezium's DDL
  parser failing on a statement it re-reads after every restart): no restart
  loop; the problem names the table, the column and the fix, the log says it
  once, and ``cdcsync_capture_unrecoverable`` is 1.
- **A Postgres source drifting from what apply set** (every minute, with the
  restore check): a partition created since gets ``REPLICA IDENTITY FULL``
  (``connectors.source_setup``), counted as ``source_setup``; a partition
  attached since has its rows snapshotted, counted as ``partition_snapshot``,
  and one detached is a problem until the daemon restarts (``connectors.partitions``).
- **A component back**: while Kafka or the source database cannot be reached
  the watchdog only reports; a restart then would fail, or leave a task
  Connect cannot stop holding the slot, and would grow the back-off. The
  silence of an outage is not a stall: it counts from the component's
  return, the back-off starts again from nothing, and capture that has not
  produced ``RETURN_GRACE_S`` after the return is healed at once rather than
  after ``stall_after_s`` (docs/daemon.md, "Back within a minute").
- **FAILED because the replication slot is held** (``replication slot … is
  active for PID n``: the connection of a task Connect could not stop): the
  backend holding it is ended before the restart, or every restart fails the
  same way.
- What it cannot heal (connector missing, still stalled or failed) it reports:
  ``health()`` feeds ``/healthz``, and every action is a log line and a count
  in ``cdcsync_capture_heals_total``; ``cdcsync_capture_heartbeat_age_seconds``
  shows the silence as it grows.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from cdcsync import kafka, metrics
from cdcsync.config import Config, SourceConfig
from cdcsync.connectors import partitions, restore, source_setup
from cdcsync.connectors.client import ConnectClient
from cdcsync.connectors.lag import stall_after_s
from cdcsync.errors import CdcsyncError, RetryableError
from cdcsync.sources import UNREACHABLE, kind_of

log = logging.getLogger("cdcsync.capture")

WATCH_S = 5.0
RETURN_GRACE_S = 20.0  # capture silent this long after Kafka or its database came back is healed at once
RESTART_FIRST_S = 10.0
RESTART_CAP_S = 600.0
WAITING = "its database cannot be reached: restarted when it answers"
RESTORE_CHECK_S = 60.0  # how often the source's log position is compared with what capture read


@dataclass
class SourceState:
    source: SourceConfig
    heartbeat_end: int = -1
    advanced_at: float = 0.0
    heals_in_row: int = 0
    next_heal: float = 0.0
    problem: str = ""
    went_back: str = ""  # the database is behind what capture read (connectors.restore); no heal, a repair
    setup_problem: str = ""  # what connectors.source_setup finds and may not fix (a table at risk it does not own)
    detached: list[str] = field(default_factory=list)  # partitions that left a table, their rows still followed
    next_restore_check: float = 0.0
    db_down: bool = False  # the database did not answer the last probe
    returned_at: float | None = None  # Kafka or the database came back then, and no heartbeat has come since

    @property
    def stall_after_s(self) -> float:
        return stall_after_s(self.source.heartbeat_interval_ms)

    @property
    def quiet_after_s(self) -> float:
        """Heartbeats missed this long: worth asking whether the database answers (a few missed beats)."""
        return max(3 * self.source.heartbeat_interval_ms / 1000, 2 * WATCH_S)

    def back(self, now: float) -> None:
        """Kafka or the database answers again: the outage was no stall, and the back-off starts afresh."""
        self.returned_at = self.advanced_at = now
        self.heals_in_row, self.next_heal = 0, 0.0

    def stalled(self, now: float) -> bool:
        if self.returned_at is not None and now - self.returned_at >= RETURN_GRACE_S:
            return True
        return now - self.advanced_at >= self.stall_after_s


# Debezium's DDL parser failed on a statement in the binlog: the task re-reads the same event after every restart.
UNPARSEABLE_DDL = re.compile(r"DDL statement couldn't be parsed[^']*'(?P<ddl>[^\n]{0,200})")
DDL_TABLE = re.compile(r"(?:CREATE|ALTER)\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?([`\w.]+)", re.I)
# ANTLR's "no viable alternative at input '...<column> <type>'": the last column and the type it stopped at.
UNKNOWN_TYPE = re.compile(r"no viable alternative at input '[^\n]*[\s(,]`?(\w+)`?\s+(\w+)'?[ \t]*$", re.M)


def unrecoverable(trace: str) -> str | None:
    """What to do about a FAILED task's error that no restart fixes, or None when a restart may (pure)."""
    found = UNPARSEABLE_DDL.search(trace)
    if not found:
        return None
    table = DDL_TABLE.search(found.group("ddl"))
    column = UNKNOWN_TYPE.search(trace)
    what = f"table {table.group(1).replace('`', '')}" if table else "a table"
    if column:
        what += f", column {column.group(1)} of type {column.group(2).lower()}"
    return (
        f"Debezium cannot parse the DDL of {what} (a type its MariaDB parser does not know, such as INET4 or "
        "INET6), and every restart re-reads it. Change that column's type or move the table out of the captured "
        "database, then create the connector anew past the statement: DELETE /connectors/<source> on Kafka "
        "Connect and run `cdcsync connectors apply` (a new snapshot; followers rank its rows by version, nothing "
        'is lost). docs/capture.md, "Types Debezium cannot parse"'
    )


# What reading a topic's end raises when the topic does not exist (as opposed to Kafka being away).
NO_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}

# A task that cannot take its slot because the connection of an earlier task still holds it.
SLOT_HELD = re.compile(r"replication slot \"?[\w.]+\"? is active for PID \d+")


def heal_backoff_s(heals_in_row: int) -> float:
    return float(min(RESTART_FIRST_S * 2 ** max(heals_in_row - 1, 0), RESTART_CAP_S))


class CaptureWatch:
    def __init__(
        self,
        config: Config,
        client: ConnectClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.client = client or ConnectClient(config.connect.url, config.connect.timeout_s, retries=1)
        self.clock = clock
        self.sources = [SourceState(s) for s in config.sources]
        self._consumer: Consumer | None = None
        self.kafka_down_since: float | None = None  # when the heartbeat end could last not be read

    def kafka_problem(self) -> str:
        return "Kafka cannot be reached: capture is not judged or restarted until it answers"

    def health(self) -> tuple[bool, list[str]]:
        problems = [f"capture: {self.kafka_problem()}"] if self.kafka_down_since is not None else []
        problems += [f"capture {s.source.name}: {s.problem}" for s in self.sources if s.problem]
        problems += [f"capture {s.source.name}: {s.went_back}" for s in self.sources if s.went_back]
        problems += [f"capture {s.source.name}: {s.setup_problem}" for s in self.sources if s.setup_problem]
        problems += [f"capture {s.source.name}: {line}" for s in self.sources for line in s.detached]
        return not problems, problems

    def tick(self) -> None:
        ends = self._kafka_ends()
        for state in self.sources:
            if ends is None:
                continue
            try:
                self._watch(state, ends[state.source.name])
            except CdcsyncError as err:
                state.problem = f"cannot be watched: {err}"
                log.warning("source=%s capture=unknown error=%s", state.source.name, err)

    def _kafka_ends(self) -> dict[str, int | None] | None:
        """Each source's heartbeat end (None: no heartbeat topic yet), or None while Kafka cannot be reached.

        Kafka's return resets every source (``SourceState.back``).
        """
        now = self.clock()
        ends: dict[str, int | None] = {}
        try:
            for state in self.sources:
                try:
                    ends[state.source.name] = self._heartbeat_end(state.source)
                except KafkaException as err:
                    if err.args[0].code() not in NO_TOPIC:
                        raise
                    ends[state.source.name] = None  # capture has never produced: judged by its state alone
        except KafkaException as err:
            if self.kafka_down_since is None:
                self.kafka_down_since = now
                log.warning("capture=unknown kafka=unreachable error=%s", err)
            return None
        if self.kafka_down_since is not None:
            log.info("capture=judged_again kafka=back after_s=%.0f", now - self.kafka_down_since)
            self.kafka_down_since = None
            for state in self.sources:
                state.back(now)
                end = ends[state.source.name]  # what was written before the outage is no sign of life after it
                state.heartbeat_end = state.heartbeat_end if end is None else end
        return ends

    def _watch(self, state: SourceState, end: int | None) -> None:
        name, now = state.source.name, self.clock()
        status = self.client.status(name)
        if status is None:
            state.problem = f"connector {name} is not registered; run `cdcsync connectors apply`"
            return
        if now >= state.next_restore_check:
            self._check_restore(state, now)
        failed = [t for t in status.get("tasks", []) if t.get("state") == "FAILED"]
        if status["connector"]["state"] == "FAILED" or failed:
            trace = (failed[0].get("trace") if failed else status["connector"].get("trace")) or ""
            fix = unrecoverable(trace)
            metrics.CAPTURE_UNRECOVERABLE.labels(name).set(1 if fix else 0)
            if fix:  # a restart would fail the same way, in a loop: say so once, and what to do
                problem = f"FAILED, not restarted: {fix}"
                if problem != state.problem:
                    log.error("source=%s capture=failed restart=no problem=%s", name, fix)
                state.problem = problem
                return
            state.problem = f"FAILED: {trace.strip().splitlines()[0][:300] if trace.strip() else 'no trace'}"
            if not self._database_answers(state, now):
                state.problem += f"; {WAITING}"
                return
            if SLOT_HELD.search(trace):  # the connection of a task Connect could not stop: every restart fails so
                self._heal(state, now, "restart_failed", lambda: self._unstick(state.source))
            else:
                self._heal(state, now, "restart_failed", lambda: self.client.restart(name))
            return
        metrics.CAPTURE_UNRECOVERABLE.labels(name).set(0)
        if end is None:
            state.problem = f"cannot be watched: no heartbeat topic {state.source.heartbeat_topic} yet"
            log.warning("source=%s capture=unknown error=%s", name, state.problem)
            return
        if end != state.heartbeat_end:
            if state.heartbeat_end >= 0 and (state.heals_in_row or state.returned_at is not None):
                log.info("source=%s capture=producing heartbeat_offset=%d after %d heal(s)", name, end,
                         state.heals_in_row)  # fmt: skip
            state.heartbeat_end, state.advanced_at = end, now
            state.heals_in_row, state.problem, state.returned_at = 0, "", None
        age = now - state.advanced_at
        metrics.CAPTURE_HEARTBEAT_AGE.labels(name).set(age)
        if status["connector"]["state"] != "RUNNING" or age < state.quiet_after_s:
            return
        silent = f"RUNNING but no heartbeat for {age:.0f} s (every {state.source.heartbeat_interval_ms} ms)"
        # Silent for a few heartbeats: a database down now is waited for, and its return starts the grace.
        if not self._database_answers(state, now):
            state.problem = f"{silent}; {WAITING}"
        elif state.stalled(now):
            state.problem = silent
            self._heal(state, now, "restart_stalled", lambda: self._unstick(state.source))

    def _database_answers(self, state: SourceState, now: float) -> bool:
        """Whether the source's database takes a connection; its return resets the source (``SourceState.back``).

        Asked only of a source that is failed or silent: a restart while the database is down (or still in
        crash recovery) fails, and only grows the back-off that would delay the heal once it is back.
        """
        try:
            self._probe(state.source)
        except UNREACHABLE as err:
            if not state.db_down:
                log.warning("source=%s capture=waiting database=unreachable error=%s", state.source.name,
                            str(err).splitlines()[0] if str(err) else type(err).__name__)  # fmt: skip
            state.db_down = True
            return False
        if state.db_down:
            log.info("source=%s capture=judged_again database=back", state.source.name)
            state.db_down = False
            state.back(now)
        return True

    def _check_restore(self, state: SourceState, now: float) -> None:
        """Compare the database's log position with capture's offset; a database down now is asked next tick."""
        try:
            found = restore.check(self.client, state.source) or ""
        except UNREACHABLE as err:  # restarting after a crash: its FAILED task must still be restarted below
            log.info("source=%s restore_check=postponed error=%s", state.source.name, str(err).splitlines()[0])
            return
        state.next_restore_check = now + RESTORE_CHECK_S
        if found and found != state.went_back:
            log.error("source=%s capture=went_back %s", state.source.name, found)
        state.went_back = found
        self._check_setup(state)

    def _check_setup(self, state: SourceState) -> None:
        """What apply set in a Postgres source, kept true: a partition made since gets REPLICA IDENTITY FULL.

        A new partition starts with Postgres' default identity, under which an UPDATE that leaves a large
        value alone sends Debezium's placeholder (docs/capture.md); followers refuse such a change, and this
        closes the window to the next check. What it may not fix is a problem in ``/healthz``.
        """
        source = state.source
        driver = kind_of(source).capture.driver_errors  # the database down, or a query of it refused
        setup_errors: tuple[type[BaseException], ...] = (*driver, OSError, RetryableError)
        partition_errors: tuple[type[BaseException], ...] = (*driver, OSError, CdcsyncError)
        try:
            setup = source_setup.plan(source)
            changed = source_setup.carry_out(source, setup)
        except setup_errors as err:  # down, restarting, or a lock it may not wait for
            log.info("source=%s setup_check=postponed error=%s", source.name, str(err).splitlines()[0])
            return
        for line in changed:
            log.warning("source=%s capture=source_setup changed=%s", source.name, line)
            metrics.CAPTURE_HEALS.labels(source.name, "source_setup").inc()
        state.setup_problem = "; ".join(setup.problems)
        try:
            snapshotted, detached = partitions.follow(self.config, source)
        except partition_errors as err:  # sent again next check: the record waits for it
            log.info("source=%s partition_check=postponed error=%s", source.name, str(err).splitlines()[0])
            return
        for line in snapshotted:
            log.warning("source=%s capture=partition_attached %s", source.name, line)
            metrics.CAPTURE_HEALS.labels(source.name, "partition_snapshot").inc()
        for line in detached:
            log.error("source=%s capture=partition_detached %s", source.name, line)
        state.detached += detached

    def _heal(self, state: SourceState, now: float, action: str, do: Callable[[], None]) -> None:
        if now < state.next_heal:
            return
        state.heals_in_row += 1
        state.next_heal = now + max(heal_backoff_s(state.heals_in_row), WATCH_S)
        log.warning("source=%s capture=%s heal=%d problem=%s", state.source.name, action, state.heals_in_row,
                    state.problem)  # fmt: skip
        metrics.CAPTURE_HEALS.labels(state.source.name, action).inc()
        do()

    def _probe(self, source: SourceConfig) -> None:
        probe(source)

    def _end_slot_backend(self, source: SourceConfig) -> int | None:
        return end_slot_backend(source)

    def _unstick(self, source: SourceConfig) -> None:
        if kind_of(source).capture.slot(source) is not None:
            ended = self._end_slot_backend(source)
            if ended is not None:
                log.warning("source=%s capture=slot_freed slot=%s ended_pid=%d", source.name, source.slot, ended)
                metrics.CAPTURE_HEALS.labels(source.name, "slot_freed").inc()
        self.client.restart_all(source.name)

    def _heartbeat_end(self, source: SourceConfig) -> int:
        if self._consumer is None:
            self._consumer = kafka.consumer({**self.config.kafka.client_config(), "group.id": "cdcsync-capture-watch"})
        try:
            return int(self._consumer.get_watermark_offsets(TopicPartition(source.heartbeat_topic, 0), timeout=10)[1])
        finally:
            kafka.serve_logs(self._consumer)  # nothing else polls it: its log lines would pile up


def probe(source: SourceConfig) -> None:
    """Connect to the source's database and close again; raises one of ``UNREACHABLE`` if it does not answer."""
    kind_of(source).capture.probe(source)


def end_slot_backend(source: SourceConfig) -> int | None:
    """End the backend holding the source's replication slot, if one does; its pid."""
    return kind_of(source).capture.end_slot_backend(source)
