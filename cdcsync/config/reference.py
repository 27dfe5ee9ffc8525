"""The config's reference and JSON Schema, generated from its models: ``docs/config.md``, ``cdcsync.schema.json``.

``python -m cdcsync.config.reference`` writes both; a unit test fails when
either differs from what the models give, so a setting added to the models
is documented by regenerating, never by hand. ``cdcsync config --schema``
prints the schema for an editor (``# yaml-language-server: $schema=...``).
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, MaxLen, MinLen
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cdcsync.config import Config
from cdcsync.config.env import NOT_SETTINGS, variables

ROOT = Path(__file__).resolve().parents[2]
REFERENCE, SCHEMA = ROOT / "docs" / "config.md", ROOT / "cdcsync.schema.json"
HIDDEN = {"origin"}  # filled by the loader, not a setting

HEADER = """# Configuration reference

Generated from the config's models (`cdcsync/config/deployment.py`) by
`python -m cdcsync.config.reference`; a test fails when this file and the
models differ. Editors that read JSON Schema can check a config against
`cdcsync.schema.json` (`cdcsync config --schema` prints it): put
`# yaml-language-server: $schema=cdcsync.schema.json` on the file's first line.

A config is one YAML file (`cdcsync.yaml`, or `--config`/`CDCSYNC_CONFIG`).
Every problem in it is reported at once, with its path, where the value
came from and what would be valid; exit code 2. Secrets are never printed
(docs/secrets.md).
"""


def reference() -> str:
    """The Markdown reference: one table per section, in the order a config reads."""
    out = [HEADER]
    for path, model in sections(Config, ""):
        title = f"`{path}`" if path else "Top level"
        out.append(f"## {title}\n")
        if model.__doc__:
            out.append(" ".join(model.__doc__.split()) + "\n")
        out.append("| key | type | default | meaning |\n|---|---|---|---|")
        for name, field in model.model_fields.items():
            if name in HIDDEN:
                continue
            out.append(f"| `{name}` | {field_type_text(field)} | {default_text(field)} | {meaning(field)} |")
        out.append("")
    out.append(environment())
    return "\n".join(out).rstrip() + "\n"


def sections(
    model: type[BaseModel], path: str, above: tuple[type[BaseModel], ...] = ()
) -> list[tuple[str, type[BaseModel]]]:
    """``model`` and every model its fields hold, depth first, each with the path a config writes it at.

    A model inside itself (a document's children) is listed once, at its first path.
    """
    found = [(path, model)]
    for name, field in model.model_fields.items():
        for inner, suffix in nested(field.annotation):
            if inner in (*above, model):
                continue
            found += sections(inner, f"{path}.{name}{suffix}" if path else f"{name}{suffix}", (*above, model))
    return found


def nested(annotation: Any) -> list[tuple[type[BaseModel], str]]:
    """The models inside a field's type, with how the path reaches them (``[]`` a list item, ``.<key>`` a map's)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return [(m, "[]" + s) for m, s in nested(args[0])]
    if origin is dict:
        return [(m, ".<key>" + s) for m, s in nested(args[1])]
    if origin in (typing.Union, types.UnionType):
        return [pair for arg in args for pair in nested(arg)]
    return []


def field_type_text(field: FieldInfo) -> str:
    """A field's type; one of a few names where its schema lists them (a kind registered outside the model)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    names = extra.get("enum")
    return " \\| ".join(f"`{a}`" for a in names) if isinstance(names, list) else type_text(field.annotation)


def type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in args if a is not type(None)) + (
            " or null" if type(None) in args else ""
        )
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}".replace("of object (below)", "of objects (below)")
    if origin is dict:
        return f"map of {type_text(args[1])}".replace("of object (below)", "of objects (below)")
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object (below)"
    return {str: "text", int: "integer", float: "number", bool: "boolean"}.get(annotation, str(annotation))


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined or isinstance(value, BaseModel):
        return ""
    if value is None:
        return "null"
    return f"`{json.dumps(value)}`"


def meaning(field: FieldInfo) -> str:
    text = (field.description or "").replace("|", "\\|")
    limits = []
    for rule in field.metadata:
        if isinstance(rule, Ge):
            limits.append(f"≥ {rule.ge}")
        if isinstance(rule, Gt):
            limits.append(f"> {rule.gt}")
        if isinstance(rule, Le):
            limits.append(f"≤ {rule.le}")
        if isinstance(rule, MinLen):
            limits.append(f"at least {rule.min_length}")
        if isinstance(rule, MaxLen):
            limits.append(f"at most {rule.max_length}")
        pattern = getattr(rule, "pattern", None)
        if isinstance(pattern, str):
            limits.append(f"matches `{pattern}`")
    return "; ".join(part for part in (text, ", ".join(limits)) if part)


ENVIRONMENT_HEADER = """## Environment overrides

Every setting is also an environment variable, which wins over the file:
`CDCSYNC_` and the setting's path in upper case (`cdcsync/config/env.py`).
A source's or follower's names the entry (`<NAME>`: its `name` in upper
case; the entry must be in the file). A property map's variable takes the
key after it, `_` for `.` (`CDCSYNC_KAFKA_PROPERTY_SASL_PASSWORD` sets
`kafka.properties.sasl.password`); a list or a map of objects takes YAML
(`CDCSYNC_SOURCE_<NAME>_TABLES='[public.orders, public.customers]'`). A
`CDCSYNC_` variable that sets nothing is a config error naming the closest
one, so a misspelling is never ignored. `CDCSYNC_CONFIG` is the config
file's path; `CDCSYNC_STATE_DIR` is where state goes when the file sets no
`state_dir` (the file's wins, so several configs on one machine keep their
own).

Why this rule rather than pydantic-settings' environment source: that one
reaches a list entry by its index (`CDCSYNC_SOURCES__0__PASSWORD`), which
changes when a source is added above it, and it ignores a variable that sets
nothing. Here an entry is reached by its name, the names predate the rule
(`CDCSYNC_SOURCE_<NAME>_PASSWORD` kept working), and the variables are
derived from the same models as this page, so neither can drift.

| variable | sets |
|---|---|
"""


def environment() -> str:
    """The variables' table: every setting's, a source's and a follower's written once for any name."""
    named = {"sources": [{"name": "<name>"}], "followers": [{"name": "<name>"}]}
    rows = [f"| `{var}` | `{path.replace('[0]', '[]')}` |" for var, path in variables(Config, named)]
    others = ", ".join(f"`{v}{'*' if v.endswith('_') else ''}`" for v in NOT_SETTINGS)
    return ENVIRONMENT_HEADER + "\n".join(rows) + f"\n\nNot settings, and never refused: {others}.\n"


def schema() -> dict[str, Any]:
    """The config's JSON Schema, as an editor checks a file with: what a file may hold (``origin`` is not)."""
    doc = Config.model_json_schema(mode="validation")
    doc["properties"] = {k: v for k, v in doc["properties"].items() if k not in HIDDEN}
    tables = doc["$defs"]["SourceConfig"]["properties"]["tables"]
    tables["items"] = {"anyOf": [{"type": "string", "description": "namespace.table or table"}, tables["items"]]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc, "title": "cdcsync config"}


def schema_text() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    REFERENCE.write_text(reference())
    SCHEMA.write_text(schema_text())
    print(f"wrote {REFERENCE.relative_to(ROOT)} and {SCHEMA.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
