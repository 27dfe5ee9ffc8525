"""Test session set-up: integration and chaos tests need the real local stack.

Locally, a test that needs the stack skips with a hint when it is down; with
CI=true the same situation is a failure, never a skip.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def stack_up() -> None:
    from tests.support import stack

    down = [name for name, comp in stack.COMPONENTS.items() if comp.pid() is None or not comp.healthy()]
    if down:
        message = f"local stack not healthy ({', '.join(down)}); run `make up` (state: {stack.STATE})"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " [CI=true: a missing service is a failure]")
        pytest.skip(message)  # only outside CI, see above
    _drop_orphan_slots()
    _first_driver()


def _first_driver() -> None:
    """Start the run's Spark driver JVM now, before the first test that needs the stack.

    PySpark launches a driver JVM from a forked child that runs Python before
    it execs; forked from a process that had run the unit tests and then a
    sink test's threads, that child crashed (a segmentation fault, failing
    every test of the module that launched it). Launched here, the JVM serves
    every module's session; only a module that needs a JVM of its own (S3A's
    class path: test_object_storage) launches another.
    """
    from cdcsync.spark import spark_session

    spark_session("cdcsync-tests").stop()  # the JVM stays up: the next session starts in it


def _drop_orphan_slots() -> None:
    """Drop the replication slots of test sources whose connector is gone: a killed test session leaves them.

    A slot nobody reads keeps every WAL segment from then on; earlier killed sessions held 31 GB and
    filled the disk. A slot whose connector still exists (another session's) is left alone.
    """
    import json
    import urllib.request

    from tests.support import ENV, pg_admin

    with urllib.request.urlopen(f"http://127.0.0.1:{ENV['CONNECT_PORT']}/connectors", timeout=10) as answer:
        connectors = set(json.load(answer))
    with pg_admin() as pg:
        slots = pg.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE NOT active AND slot_name LIKE 'cdcsync\\_%'"
        ).fetchall()
        for (slot,) in slots:
            if slot.removeprefix("cdcsync_") not in connectors:
                pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
