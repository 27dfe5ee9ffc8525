"""Reading the configuration: a YAML file, environment overrides, one error that lists every problem.

Connection settings are overridden by environment variables, which win over the
file (``<NAME>`` is the source's or follower's name in upper case):

=============================================  ====================================================
variable                                       sets
=============================================  ====================================================
``CDCSYNC_KAFKA_BOOTSTRAP_SERVERS``            ``kafka.bootstrap_servers``
``CDCSYNC_KAFKA_PROPERTY_<KEY>``               ``kafka.properties`` (``_`` for ``.``:
                                               ``..._SASL_PASSWORD`` sets ``sasl.password``)
``CDCSYNC_KAFKA_JAVA_PROPERTY_<KEY>``          ``kafka.java_properties``, the same way
``CDCSYNC_CONNECT_URL``                        ``connect.url``
``CDCSYNC_CONNECT_SECRETS_DIR``                ``connect.secrets_dir``
``CDCSYNC_SOURCE_<NAME>_<FIELD>``              ``HOST``, ``PORT``, ``DATABASE``, ``USER``, ``PASSWORD``
``CDCSYNC_FOLLOWER_<NAME>_<FIELD>``            ``URL``, ``USERNAME``, ``PASSWORD``, ``API_KEY``, ``TLS_CA``
=============================================  ====================================================

Every problem is reported with its field path, where the value came from and
what would be valid (``ConfigError``), never with a secret's value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cdcsync.config import ENV_PREFIX, MASK, SECRET_KEY, Config
from cdcsync.errors import ConfigError

DEFAULT_CONFIG = "cdcsync.yaml"
SOURCE_ENV_FIELDS = ("host", "port", "database", "user", "password")
FOLLOWER_ENV_FIELDS = ("url", "username", "password", "api_key", "tls_ca")
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


def _apply_env(raw: dict[str, Any], env: Mapping[str, str], origin: dict[str, str]) -> None:
    for section, key in (("kafka", "bootstrap_servers"), ("connect", "url"), ("connect", "secrets_dir")):
        var = f"{ENV_PREFIX}{section.upper()}_{key.upper()}"
        if var in env:
            raw.setdefault(section, {})[key] = env[var]
            origin[f"{section}.{key}"] = f"environment variable {var}"
    for key, prefix in (("properties", "KAFKA_PROPERTY_"), ("java_properties", "KAFKA_JAVA_PROPERTY_")):
        for var in sorted(v for v in env if v.startswith(ENV_PREFIX + prefix)):
            prop = var[len(ENV_PREFIX + prefix) :].lower().replace("_", ".")
            kafka = raw.setdefault("kafka", {})
            if isinstance(kafka, dict):
                kafka.setdefault(key, {})[prop] = env[var]
                origin[f"kafka.{key}.{prop}"] = f"environment variable {var}"
    named = (("followers", "FOLLOWER", FOLLOWER_ENV_FIELDS), ("sources", "SOURCE", SOURCE_ENV_FIELDS))
    for section, kind, fields in named:
        for index, entry in enumerate(raw.get(section) or []):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            for key in fields:
                var = f"{ENV_PREFIX}{kind}_{entry['name'].upper()}_{key.upper()}"
                if var in env:
                    entry[key] = env[var]
                    origin[f"{section}[{index}].{key}"] = f"environment variable {var}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


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
    _apply_env(raw, env, origin)
    try:
        return Config.model_validate({**raw, "origin": origin})
    except ValidationError as err:
        problems = []
        for e in err.errors():
            where = _path(e["loc"])
            source = origin.get(where, f"{file}")
            # A misspelt key may hold anything, a password included: its value is not shown either.
            hidden = e["type"] in ("missing", "extra_forbidden") or SECRET_KEY.search(where)
            value = "" if hidden else f" (got {_short(_masked(e['input']))})"
            problems.append(f"{where}: {mask_text(e['msg'])}{value} [from {source}]")
        raise ConfigError(problems) from None
