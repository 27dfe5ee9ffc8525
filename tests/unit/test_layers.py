"""The imports run one way, and no modules import each other in a circle (docs/architecture.md).

Read with ``ast`` from the source as installed (``connectors/`` is ``cdcsync.connectors``, and so on): every
import counts, those inside functions and under ``TYPE_CHECKING`` too, since a lazy import is a tie all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "cdcsync": "cdcsync",
    "connectors": "cdcsync.connectors",
    "sync": "cdcsync.sync",
    "snapshot": "cdcsync.snapshot",
}
# From the command down; a module may import its own layer's and those below.
LAYERS = ("cdcsync.cli", "cdcsync.snapshot", "cdcsync.sync", "cdcsync.connectors", "cdcsync")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for file in (ROOT / folder).rglob("*.py"):
            parts = list(file.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = file
    return found


def _imports(name: str, file: Path, modules: dict[str, Path]) -> set[str]:
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
    found = set()
    for item in named:
        while item and item not in modules:
            item = item.rpartition(".")[0]
        if item and item != name:
            found.add(item)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, file, modules) for name, file in modules.items()}


def _layer(module: str) -> int:
    if module == "cdcsync.__main__":
        return 0
    return next(i for i, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + "."))


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_module_imports_one_of_a_layer_above_it() -> None:
    graph = _graph()
    up = [f"{m} -> {d}" for m, deps in sorted(graph.items()) for d in sorted(deps) if _layer(d) < _layer(m)]
    assert up == [], f"imports against the layers ({' > '.join(LAYERS)}): {up}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _circles(_graph()) == []


def test_the_checks_see_lazy_imports_and_circles() -> None:
    graph = _graph()
    assert "cdcsync.sync.verify.compare" in graph["cdcsync.cli.verify"]  # imported inside a function
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
