"""Every setting from an environment variable, by one rule derived from the config's models.

A setting's variable is ``CDCSYNC_`` and its path in upper case, joined by ``_``::

    kafka.bootstrap_servers               CDCSYNC_KAFKA_BOOTSTRAP_SERVERS
    spark.driver_memory                   CDCSYNC_SPARK_DRIVER_MEMORY
    state_dir                             CDCSYNC_STATE_DIR

A source's or follower's setting names the entry by its ``name`` (the entry
must be in the file): ``CDCSYNC_SOURCE_PG_MAIN_PASSWORD``,
``CDCSYNC_FOLLOWER_SEARCH_VERIFY_ROWS_PER_S``. One key of a property map is
the map's variable and the key, ``_`` for ``.``:
``CDCSYNC_KAFKA_PROPERTY_SASL_PASSWORD`` sets ``kafka.properties.sasl.password``,
``CDCSYNC_SOURCE_PG_MAIN_DEBEZIUM_SNAPSHOT_FETCH_SIZE``,
``CDCSYNC_SPARK_CONF_SPARK_HADOOP_FS_S3A_ENDPOINT`` (keys come out in lower
case: a key with capitals, like some of Spark's, is set in the file). A list
or a map of objects takes YAML: ``CDCSYNC_SOURCE_PG_MAIN_TABLES='[public.orders]'``.

A ``CDCSYNC_`` variable that sets nothing is an error naming the closest
variable that would (a misspelt override is never ignored), unless it is one
of ``NOT_SETTINGS``.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from cdcsync.config.base import ENV_PREFIX

# Variables that start with the prefix and are not settings: the config file's path, the state directory where a
# config sets no state_dir (cdcsync.state: the file's wins, so configs of one machine keep their own), the local
# stack's service user (deploy/local) and the fault scenarios' knobs (tests/chaos).
NOT_SETTINGS = ("CDCSYNC_CONFIG", "CDCSYNC_STATE_DIR", "CDCSYNC_SERVICE_USER", "CDCSYNC_CHAOS_")
DEFAULT_ONLY = {"state_dir"}  # read from the environment where the file sets none, never over the file
ENTRIES = {"sources": "SOURCE", "followers": "FOLLOWER"}  # lists whose entries are named in their variables
MAP_WORDS = {"properties": "PROPERTY", "java_properties": "JAVA_PROPERTY"}  # one key of these maps: a property
HIDDEN = {"origin"}
NAMED_BY = "name"  # an entry's name is in its variables, never set by one


@dataclass(frozen=True)
class Setting:
    """One variable: the raw config's path it sets, and how its text is read."""

    var: str
    path: tuple[str | int, ...]
    form: str  # "text": as written (the models parse it), "yaml": a list or map, "map": the variable is a prefix


def settings(model: type[BaseModel], raw: Mapping[str, Any]) -> list[Setting]:
    """Every variable that sets something in a config of ``model`` whose file holds ``raw``."""
    found: list[Setting] = []
    for name, field in model.model_fields.items():
        if name in HIDDEN or name in DEFAULT_ONLY:
            continue
        entries = raw.get(name)
        if name in ENTRIES:
            for index, entry in enumerate(entries if isinstance(entries, list) else []):
                inner = _model_in(typing.get_args(field.annotation)[0])
                if isinstance(entry, dict) and isinstance(entry.get("name"), str) and inner is not None:
                    prefix = f"{ENV_PREFIX}{ENTRIES[name]}_{entry['name'].upper()}"
                    found += [s for s in _walk(inner, prefix, (name, index)) if s.path[-1] != NAMED_BY]
        else:
            found += _walk_field(name, field.annotation, ENV_PREFIX.rstrip("_"), ())
    return found


def _walk(model: type[BaseModel], prefix: str, path: tuple[str | int, ...]) -> list[Setting]:
    found: list[Setting] = []
    for name, field in model.model_fields.items():
        if name not in HIDDEN:
            found += _walk_field(name, field.annotation, prefix, path)
    return found


def _walk_field(name: str, annotation: Any, prefix: str, path: tuple[str | int, ...]) -> list[Setting]:
    inner = _model_in(annotation)
    if inner is not None:
        return _walk(inner, f"{prefix}_{name.upper()}", (*path, name))
    if _is_property_map(annotation):
        return [Setting(f"{prefix}_{MAP_WORDS.get(name, name.upper())}_", (*path, name), "map")]
    form = "yaml" if typing.get_origin(_bare(annotation)) in (list, dict) else "text"
    return [Setting(f"{prefix}_{name.upper()}", (*path, name), form)]


def _bare(annotation: Any) -> Any:
    """The type without ``Annotated`` and without ``| None``."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _bare(args[0])
    return annotation


def _model_in(annotation: Any) -> type[BaseModel] | None:
    bare = _bare(annotation)
    return bare if isinstance(bare, type) and issubclass(bare, BaseModel) else None


def _is_property_map(annotation: Any) -> bool:
    bare = _bare(annotation)
    if typing.get_origin(bare) is not dict:
        return False
    return _bare(typing.get_args(bare)[1]) is str


def apply(
    model: type[BaseModel], raw: dict[str, Any], env: Mapping[str, str], origin: dict[str, str], *, strict: bool = True
) -> list[str]:
    """Set ``raw`` from ``env``, note each setting's origin; the problems (unknown or unreadable variables).

    ``strict``: a ``CDCSYNC_`` variable that sets nothing is a problem; without it (a config made from the
    environment alone, with no file to name sources and followers) it is left alone.
    """
    known = settings(model, raw)
    exact = {s.var: s for s in known if s.form != "map"}
    maps = [s for s in known if s.form == "map"]
    problems: list[str] = []
    for var in sorted(v for v in env if v.startswith(ENV_PREFIX)):
        setting = exact.get(var)
        prop = None
        if setting is None:
            setting = next((s for s in maps if var.startswith(s.var) and len(var) > len(s.var)), None)
            prop = var[len(setting.var) :].lower().replace("_", ".") if setting else None
        if setting is None:
            if strict and not var.startswith(NOT_SETTINGS):
                problems.append(_unknown(var, known))
            continue
        value: Any = env[var]
        if setting.form == "yaml":
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as err:
                problems.append(f"{var}: not valid YAML ({str(err).splitlines()[0]}); a list is written [a, b]")
                continue
        path = (*setting.path, prop) if prop else setting.path
        if _put(raw, path, value):
            origin[path_text(path)] = f"environment variable {var}"
    return problems


def _unknown(var: str, known: list[Setting]) -> str:
    names = [s.var + ("<KEY>" if s.form == "map" else "") for s in known]
    close = difflib.get_close_matches(var, names, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{var}: no setting has this variable (a source's or follower's needs its entry in the file){hint}"


def _put(raw: dict[str, Any], path: tuple[str | int, ...], value: Any) -> bool:
    """Set ``raw`` at ``path``, making the maps on the way; False where the file has something else there."""
    here: Any = raw
    for part in path[:-1]:
        if isinstance(part, int):
            here = here[part]
            continue
        if not isinstance(here, dict):
            return False
        if here.get(part) is None:  # absent, or a section written empty (`kafka:`)
            here[part] = {}
        here = here[part]
    if not isinstance(here, dict):
        return False
    here[path[-1]] = value
    return True


def path_text(path: tuple[str | int, ...]) -> str:
    """A path as validation errors name it: ``sources[0].password``, ``kafka.properties.sasl.password``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def variables(model: type[BaseModel], raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(variable, the setting's path) for every setting: the reference's table."""
    return [(s.var + ("<KEY>" if s.form == "map" else ""), path_text(s.path)) for s in settings(model, raw)]
