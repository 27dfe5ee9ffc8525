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


def write_private(path: Path, text: str, to_dir_owner: bool = False) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600; the directory 0700 when made), atomically.

    ``to_dir_owner``: run as root, the file goes to the directory's owner (a
    source's secrets for Connect's FileConfigProvider: the user the Connect
    worker runs as owns that directory; deploy/local/stack.py creates it so).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        owner = path.parent.stat()
        if to_dir_owner and os.geteuid() == 0 and owner.st_uid != 0:
            os.chown(temp, owner.st_uid, owner.st_gid)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
