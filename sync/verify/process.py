"""A verify's source side in a process of its own, for a table large enough to be worth its start.

Reading a source row, mapping it, putting it in the store's form and hashing
it is Python's work, and so is decoding the store's pages: on one
interpreter the two sides share one core however many the machine has (a
million-row verify kept its interpreter busy 21 s of its 21 s). A table of
``PROCESS_BYTES`` or more on disk has its source side read in a spawned
process (~1 s to start and import), which sends the (id, digest) pairs back
over a pipe in batches; the caller spills them as it would its own. Spawned,
not forked: a fork would inherit the caller's threads' locks (the daemon's
Spark gateway among them).
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from cdcsync.config import Config, SourceConfig, TableRef
from cdcsync.errors import FatalError
from cdcsync.sync.mapping import TableMapping

PROCESS_BYTES = 32 * 2**20  # a smaller table is read on a thread: the process's start would cost more than it saves
BATCH = 5_000  # pairs a message
Pair = tuple[str, bytes]


def pairs_from_process(
    config: Config, follower: str, source: SourceConfig, table: TableRef, mapping: TableMapping, what: str, shown: bool
) -> Iterator[Pair]:
    """The source side's pairs, read in a spawned process; ``shown``: it prints its progress lines to stderr.

    Closing the iterator (the store side failed) ends the process.
    """
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    process = context.Process(
        target=_run,
        args=(sending, config, follower, source.name, table, mapping, what, shown),
        name=f"cdcsync-verify-{follower}",
        daemon=True,
    )
    process.start()
    sending.close()
    try:
        while True:
            try:
                message = receiving.recv()
            except EOFError:
                process.join(10)
                ended = f"{what}: the process reading the source ended (exit code {process.exitcode})"
                raise FatalError(ended) from None
            if message is None:
                return
            if isinstance(message, BaseException):
                raise message
            yield from message
    finally:
        receiving.close()
        if process.is_alive():
            process.terminate()
        process.join(10)


def _run(
    sending: Connection,
    config: Config,
    follower_name: str,
    source_name: str,
    table: TableRef,
    mapping: TableMapping,
    what: str,
    shown: bool,
) -> None:
    from cdcsync.sync.sink import batched
    from cdcsync.sync.sinks import build_sink
    from cdcsync.sync.verify.sides import source_pairs

    try:
        follower = next(f for f in config.followers if f.name == follower_name)
        source = next(s for s in config.sources if s.name == source_name)
        sink = build_sink(config, follower, None, fill=True)  # for its stored form only: never opened
        for batch in batched(source_pairs(source, table, mapping, sink, None, _stderr if shown else None, what), BATCH):
            sending.send(batch)
        sending.send(None)
    except BaseException as err:  # the caller raises it as its own
        try:
            sending.send(err)
        except Exception:  # an error that does not pickle
            sending.send(RuntimeError(f"{type(err).__name__}: {err}"))
    finally:
        sending.close()


def _stderr(line: Any) -> None:
    print(line, file=sys.stderr, flush=True)
