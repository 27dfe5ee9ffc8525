"""No code outside the package that implements a kind asks which kind it has: a kind's behaviour is declared.

``kind_switches`` finds, with ``ast``, every comparison (``==``, ``!=``, ``in``, ``not in``) of an expression
against one of a set of string literals, every dict display keyed by one and every ``case`` of one: the shapes
a switch on a kind's name takes (``if follower.kind == "delta"``, ``{"redis": ..., "delta": ...}[follower.kind]``,
``match follower.kind``). Each test names the literals of one kind and the paths that may hold them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cdcsync", "connectors", "sync", "snapshot")  # the installed source; tests, bench and deploy are not


def _literal(node: ast.expr, literals: set[str]) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in literals else None


def _compared(node: ast.Compare, literals: set[str]) -> bool:
    """A literal on either side of ``==``/``!=``, or in the container of ``in``/``not in``."""
    sides = [node.left, *node.comparators]
    for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True):
        if isinstance(op, ast.Eq | ast.NotEq) and (_literal(left, literals) or _literal(right, literals)):
            return True
        if isinstance(op, ast.In | ast.NotIn):
            items = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
            if any(_literal(item, literals) for item in items):
                return True
    return False


def kind_switches(literals: set[str], skip: tuple[str, ...]) -> list[str]:
    """``path:line`` of each comparison against one of ``literals``, each dict display keyed by one and each
    ``case`` of one, in the source packages; ``skip``: paths not scanned, relative to the repository (a folder's
    ends with ``/``)."""
    found: list[tuple[str, int]] = []
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            if any(path == s or (s.endswith("/") and path.startswith(s)) for s in skip):
                continue
            for node in ast.walk(ast.parse(file.read_text(), path)):
                if isinstance(node, ast.Compare) and _compared(node, literals):
                    found.append((path, node.lineno))
                elif isinstance(node, ast.Dict) and any(k is not None and _literal(k, literals) for k in node.keys):
                    found.append((path, node.lineno))
                elif isinstance(node, ast.MatchValue) and _literal(node.value, literals):  # case "delta":
                    found.append((path, node.lineno))
    return [f"{path}:{line}" for path, line in sorted(found)]


SINK_KINDS = {"elasticsearch", "redis", "delta"}
# sync/sinks/ implements the kinds: its registry maps a kind to its class. Nothing else is skipped: a follower's
# config (cdcsync/config/follower.py) declares its kinds as classes whose `kind` is a Literal, which is no
# comparison; "delta" as Spark's format name (format("delta")) or a metric's label is no comparison either.
SINK_KIND_HOME = ("sync/sinks/",)


def test_no_sink_kind_switch_outside_the_sinks_package() -> None:
    found = kind_switches(SINK_KINDS, SINK_KIND_HOME)
    assert found == [], (
        "a switch on a follower's kind outside sync/sinks/ (declare it on the kind's config class or sink class "
        f"instead): {', '.join(found)}"
    )


def test_the_scanner_finds_every_shape_of_a_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cdcsync").mkdir()
    (tmp_path / "cdcsync" / "a.py").write_text(
        'x = f.kind == "delta"\n'
        'y = f.kind in ("redis", "other")\n'
        'z = {"elasticsearch": 1}[f.kind]\n'
        'w = "delta" != f.kind\n'
        'ok = spark.read.format("delta")\n'
        'ok2 = f.kind == "postgres"\n'
        "match f.kind:\n"
        '    case "redis":\n'
        "        pass\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("cdcsync",))
    assert kind_switches(SINK_KINDS, ()) == [f"cdcsync/a.py:{line}" for line in (1, 2, 3, 4, 8)]
    assert kind_switches(SINK_KINDS, ("cdcsync/a.py",)) == []


def test_each_follower_kind_has_its_config_class_and_its_sink_class() -> None:
    from typing import get_args

    from cdcsync.config import FollowerConfig
    from cdcsync.sync.sinks import KINDS

    classes = {get_args(c.model_fields["kind"].annotation): c for c in FollowerConfig.__subclasses__()}
    assert set(classes) == {(kind,) for kind in get_args(FollowerConfig.model_fields["kind"].annotation)}
    assert {kind for (kind,) in classes} == SINK_KINDS == set(KINDS)
    assert type(FollowerConfig(name="w", kind="delta")) is classes["delta",]  # built as its kind's class


# A source's kind, and Debezium's names of the connectors that read one (an event's ``source.connector``).
SOURCE_KINDS = {"postgres", "mariadb", "mysql", "postgresql"}
# cdcsync/sources/ implements the kinds: one package per database, behind the contract in its roles.
SOURCE_KIND_HOME = ("cdcsync/sources/",)


def test_no_source_kind_switch_outside_the_sources_package() -> None:
    found = kind_switches(SOURCE_KINDS, SOURCE_KIND_HOME)
    assert found == [], (
        "a switch on a source's kind outside cdcsync/sources/ (give the kind a method or attribute on one of its "
        f"roles instead): {', '.join(found)}"
    )


def test_each_source_kind_is_one_the_config_accepts() -> None:
    from cdcsync.config import SourceConfig
    from cdcsync.sources import KINDS

    assert SourceConfig.model_json_schema()["properties"]["kind"]["enum"] == list(KINDS)
    assert set(KINDS) <= SOURCE_KINDS, "a new kind's name joins SOURCE_KINDS, so that no code switches on it"
