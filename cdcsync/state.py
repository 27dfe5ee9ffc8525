"""Where cdcsync keeps its state: one rule for the daemon, the CLI, the local stack and the Makefile.

``CDCSYNC_STATE_DIR`` if set; else ``/var/lib/cdcsync`` for root (root's home
is closed to the unprivileged user the local databases run as); else
``$XDG_DATA_HOME/cdcsync`` (``~/.local/share/cdcsync``). A config's
``state_dir`` overrides it for that deployment's followers (``base_dir``).

Standard library only: ``deploy/local/`` imports it before the project's
virtualenv exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdcsync.config import Config


def state_dir() -> Path:
    if os.environ.get("CDCSYNC_STATE_DIR"):
        return Path(os.environ["CDCSYNC_STATE_DIR"])
    if os.geteuid() == 0:
        return Path("/var/lib/cdcsync")
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "cdcsync"


def base_dir(config: Config) -> Path:
    """A deployment's state: its config's ``state_dir``, or the machine's."""
    return Path(config.state_dir) if config.state_dir else state_dir()
