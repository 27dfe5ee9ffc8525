"""Reading the configuration: a YAML file, environment overrides, one error that lists every problem.

Every setting can be overridden by an environment variable, which wins over
the file: ``CDCSYNC_`` and the setting's path (``CDCSYNC_KAFKA_BOOTSTRAP_SERVERS``,
``CDCSYNC_SOURCE_<NAME>_PASSWORD``, ``CDCSYNC_SPARK_CONF_<KEY>``), by the one
rule of ``cdcsync.config.env``; docs/config.md lists them all.

Every problem is reported with its field path, where the value came from and
what would be valid (``ConfigError``), never with a secret's value. A
``CDCSYNC_`` variable that sets nothing is a problem too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cdcsync.config import MASK, SECRET_KEY, Config
from cdcsync.config import env as config_env
from cdcsync.config.base import ENV_PREFIX
from cdcsync.errors import ConfigError

DEFAULT_CONFIG = "cdcsync.yaml"
URL_USERINFO = re.compile(r"(\w+://)([^/@\s:]*):[^/@\s]*@")


def mask_text(text: str) -> str:
    """``text`` with the credentials of any URL in it masked: for messages that may quote a URL."""
    return URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", text)


def _masked(value: Any) -> Any:
    """A config value as shown in an error: secret-looking keys masked, URL credentials masked."""
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and SECRET_KEY.search(k) else _masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return mask_text(value) if isinstance(value, str) else value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read, override from the environment and validate; raise ``ConfigError`` listing every problem."""
    env = os.environ if env is None else env
    file = Path(path or env.get(f"{ENV_PREFIX}CONFIG") or DEFAULT_CONFIG)
    try:
        raw = yaml.safe_load(file.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError([f"config file {file} not found (pass --config or set {ENV_PREFIX}CONFIG)"]) from None
    except yaml.YAMLError as err:
        raise ConfigError([f"{file} is not valid YAML: {err}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{file}: the top level must be a mapping with kafka, connect and sources"])
    origin: dict[str, str] = {}
    problems = config_env.apply(Config, raw, env, origin)
    try:
        config = Config.model_validate({**raw, "origin": origin})
    except ValidationError as err:
        for e in err.errors():
            where = config_env.path_text(tuple(e["loc"])) or "(top level)"
            source = origin.get(where, f"{file}")
            # A misspelt key may hold anything, a password included: its value is not shown either.
            hidden = e["type"] in ("missing", "extra_forbidden") or SECRET_KEY.search(where)
            value = "" if hidden else f" (got {_short(_masked(e['input']))})"
            problems.append(f"{where}: {mask_text(e['msg'])}{value} [from {source}]")
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def environment_config(env: Mapping[str, str] | None = None) -> Config:
    """The config the environment alone gives (no file): for a Spark session made outside a command."""
    raw: dict[str, Any] = {}
    origin: dict[str, str] = {}
    problems = config_env.apply(Config, raw, os.environ if env is None else env, origin, strict=False)
    try:
        if problems:
            raise ConfigError(problems)
        return Config.model_validate({**raw, "origin": origin})
    except ValidationError as err:
        raise ConfigError([f"{config_env.path_text(tuple(e['loc']))}: {e['msg']}" for e in err.errors()]) from None
