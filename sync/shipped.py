"""What the driver ships to a follower's Spark workers: the config without its secrets, and where they are.

Secrets are not shipped in it (docs/secrets.md). A task receives the config as
``Config.redacted()`` (every password, API key and secret-looking property
masked) and the path of a file the driver wrote, mode 0600 under the state
directory, holding this follower's secrets and its sources' passwords (the
MariaDB snapshot-row lookup and the values read again from Postgres,
``sync.reselect``, need them); the worker puts them back.
Locally the workers are the driver's user on the driver's machine and read
it. On a cluster that path must be on storage every executor sees (readable
only by the user Spark runs as), or, when it is absent, the worker takes the
secrets from its own environment: ``CDCSYNC_FOLLOWER_<NAME>_PASSWORD``,
``..._API_KEY`` and ``CDCSYNC_KAFKA_PROPERTY_<KEY>`` (set on each worker
node, e.g. in ``conf/spark-env.sh``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cdcsync.config import MASK, Config
from cdcsync.config.base import ENV_PREFIX
from cdcsync.errors import FatalError
from cdcsync.state import base_dir, write_private


def shipped_config(config: Config, name: str) -> str:
    """What tasks receive: the redacted config and where follower ``name``'s secrets are (module docstring)."""
    index = next(i for i, f in enumerate(config.followers) if f.name == name)
    # Its sources' passwords: MariaDB's snapshot-row lookup, and Postgres values read again (sync.reselect).
    followed = {source.name for source, _ in config.followed_tables(config.followers[index])}
    sources = {("sources", i, "password") for i, s in enumerate(config.sources) if s.name in followed}
    mine = [
        [list(p), v]
        for p, v in config.secrets().items()
        if p[0] == "kafka" or p[:2] == ("followers", index) or p in sources
    ]
    path = base_dir(config) / "secrets" / f"{name}.json"
    if mine:
        write_private(path, json.dumps(mine))
    else:
        path.unlink(missing_ok=True)
    return json.dumps({"config": config.redacted(), "secrets_file": str(path), "secrets": bool(mine)})


def worker_secrets(shipped: dict[str, Any], name: str) -> list[tuple[tuple[str | int, ...], str]]:
    """This worker's secrets for follower ``name``: the driver's file, else this worker's environment."""
    if not shipped["secrets"]:
        return []
    file = Path(shipped["secrets_file"])
    if file.exists():
        return [(tuple(path), value) for path, value in json.loads(file.read_text())]
    found: list[tuple[tuple[str | int, ...], str]] = []
    config = shipped["config"]
    index = next(i for i, f in enumerate(config["followers"]) if f["name"] == name)
    for key in ("password", "api_key"):
        var = f"{ENV_PREFIX}FOLLOWER_{name.upper()}_{key.upper()}"
        if config["followers"][index].get(key) == MASK:
            if var not in os.environ:
                raise FatalError(
                    f"follower {name}: this Spark worker cannot read {file} and {var} is not set in its environment; "
                    "put the file on storage every executor sees or set the variable on each worker (docs/secrets.md)"
                )
            found.append((("followers", index, key), os.environ[var]))
    for section, prefix in (("properties", "KAFKA_PROPERTY_"), ("java_properties", "KAFKA_JAVA_PROPERTY_")):
        for prop, value in config["kafka"][section].items():
            var = ENV_PREFIX + prefix + prop.upper().replace(".", "_")
            if value == MASK and var in os.environ:
                found.append((("kafka", section, prop), os.environ[var]))
    return found
