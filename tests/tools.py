"""Commands the tests run that are not Python packages: found, or the test fails under CI and skips elsewhere."""

from __future__ import annotations

import os
import shutil

import pytest


def required(command: str, package: str) -> str:
    """The path of ``command`` (Debian package ``package``, which deploy/local/install.sh installs)."""
    found = shutil.which(command)
    if found is None:
        message = f"{command} not installed (Debian package `{package}`; deploy/local/install.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " [CI=true: a missing tool is a failure]")
        pytest.skip(message)  # only outside CI, see above
    return found
