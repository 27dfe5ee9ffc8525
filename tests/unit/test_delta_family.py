"""The sink modules (``sync/sinks/*.py``) import each other in one direction: no module of a family needs its sink.

A sink's module composes the classes of its family's modules (``delta.py``: the tables, merge, reads, publish and
history classes of ``delta_*.py``); none of those imports the sink module back, not even for typing, so any of them
imports alone and the graph has no cycle. Read from the source with ``ast``: imports at the top, inside functions
and under ``TYPE_CHECKING`` alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cdcsync.sync.sinks

PACKAGE = "cdcsync.sync.sinks"
SINKS = Path(cdcsync.sync.sinks.__file__).parent


def imported(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` (names in the package; ``__init__`` for the package itself) ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package (level 1) or above it
                base = PACKAGE if node.level == 1 else PACKAGE.rsplit(".", node.level - 1)[0]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # Each name imported from the package itself is a module of it, or one of its __init__'s names.
            names = [f"{module}.{alias.name}" for alias in node.names] if module == PACKAGE else [module]
        else:
            continue
        for name in names:
            short = name[len(PACKAGE) + 1 :].split(".")[0] if name.startswith(PACKAGE + ".") else None
            if short is not None:
                found.add(short if short in modules else "__init__")
    found.discard(path.stem)
    return found


def graph() -> dict[str, set[str]]:
    """Each module of ``sync/sinks`` -> the modules of ``sync/sinks`` it imports."""
    files = {path.stem: path for path in SINKS.glob("*.py")}
    return {name: imported(path, set(files)) for name, path in sorted(files.items())}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as the modules along it (the first again at the end), or None."""
    state: dict[str, str] = {}  # module -> "open" (on the path being walked) or "done"
    path: list[str] = []

    def walk(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for other in sorted(edges.get(module, ())):
            if state.get(other) == "open":
                return path[path.index(other) :] + [other]
            if other not in state and (found := walk(other)):
                return found
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state and (found := walk(module)):
            return found
    return None


def test_the_import_graph_is_read_from_every_kind_of_import() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    edges = graph()
    assert {"delta_tables", "delta_merge", "delta_reads"} <= edges["delta"]  # top-level imports are seen
    assert "delta_values" in edges["delta_load"]


def test_the_delta_modules_import_each_other_in_one_direction() -> None:
    edges = graph()
    assert cycle(edges) is None, " -> ".join(cycle(edges) or [])
    family = [name for name in edges if name.startswith("delta_")]
    assert family and not [name for name in family if "delta" in edges[name]], "a delta_* module imports DeltaSink"
