"""The Python model's layers point down: no import cycle in python/perseus (issue 27).

The graph is built from the source with `ast`, counting every import a
module makes when it runs: at module level and inside functions alike (an
import moved into a function still makes a cycle, only a later one).
Imports under ``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "perseus"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Modules of `known` that `module` imports when it runs."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def resolve(name: str) -> None:
        # `from . import plotting` names a module; `from .plan import Plan` a member.
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                resolve(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "perseus":
                for alias in node.names:
                    resolve(f"{target}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    # The compiled core (_core, described by its .pyi stub) imports nothing of ours.
    known = set(files) | {module_name(p) for p in PACKAGE.rglob("*.pyi")}
    return {
        name: _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
        for name, path in files.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (a list of modules, the first repeated last), or []."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            # A package's __init__ imports its submodules; a submodule that
            # imports its own package (for a sibling) is not a cycle of ours.
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return []


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        from .plan import Plan
        if TYPE_CHECKING:
            from .frontier import Frontier
        def f():
            from . import plotting
        """
    )
    known = {"perseus", "perseus.plan", "perseus.frontier", "perseus.plotting"}
    assert _imports(ast.parse(source), "perseus.x", False, known) == {
        "perseus.plan",
        "perseus.plotting",
    }


def test_no_import_cycle_in_perseus():
    graph = import_graph()
    assert "perseus.frontier" in graph
    assert "perseus._replay" in graph
    assert "perseus.megatron._attach" in graph  # subpackages too
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_records_know_nothing_of_the_solver_entry():
    """`Plan`, `Frontier`, their files and timelines sit below `optimize` (issue 27)."""
    graph = import_graph()

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    for record in (
        "perseus.plan",
        "perseus.frontier",
        "perseus._frontier_file",
        "perseus.timeline",
    ):
        assert "perseus.optimize" not in reaches(record), record


def test_frontier_attributes_are_typed_and_read_only_for_mypy(mypy_strict):
    """`fr.unit_time_s = 3.0` fails under mypy --strict; attributes have real types."""
    errors, output = mypy_strict(
        "uses_frontier.py",
        """
        import numpy as np
        import numpy.typing as npt
        from typing_extensions import assert_type
        from perseus import Frontier

        def use(fr: Frontier) -> None:
            assert_type(fr.unit_time_s, float)
            assert_type(fr.steps, int)
            assert_type(fr.iteration_times_s, npt.NDArray[np.float64])
            assert_type(fr.energies_j, npt.NDArray[np.float64])
            fr.unit_time_s = 3.0
        """,
    )
    assert len(errors) == 1, output
    assert "uses_frontier.py:12" in errors[0], output
    assert "read-only" in errors[0], output
