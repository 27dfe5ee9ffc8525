"""`stack.py up` right after `stack.py kill`: the killed process is not gone yet, and `up` starts the component anyway.

A killed process stays a zombie until its parent reaps it (pid 1 here took
~2 s; the kill matrix waited 15 s in CI and still found the old pid). `up` used
to take that pid for a component still starting, wait for it, and fail with
"exited during start-up"; Postgres itself refuses to start while its lock
file names a pid that exists.
"""

from __future__ import annotations

import pytest

from tests.support import execute, stack


@pytest.mark.parametrize("component", ["postgres", "redis"])
def test_up_at_once_after_kill_starts_the_component(component: str) -> None:
    killed = stack.COMPONENTS[component].pid()
    assert killed is not None, f"{component} is not running before the test"
    try:
        assert stack.main(["kill", component]) == 0
        assert stack.main(["up", component]) == 0
        pid = stack.COMPONENTS[component].pid()
        assert pid is not None and pid != killed
        if component == "postgres":
            execute("postgres", "SELECT 1")
        else:
            assert stack.redis_ping()
    finally:
        stack.main(["up"])  # whatever the test left down
