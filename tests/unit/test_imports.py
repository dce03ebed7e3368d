"""No import circle among relayrl's modules, lazy imports (inside functions) included.

Reads every module of the package with ``ast`` (nothing is imported) and follows each ``import`` /
``from ... import`` statement, wherever it stands, to the relayrl module it loads: ``from pkg import name``
goes to ``pkg.name`` when that is a module, else to ``pkg`` itself. An ``import_module`` / ``__import__``
call whose name starts with a literal ``"relayrl."`` (``f"relayrl.algos.{name}"``) goes to every module the
name can be. A package's own ``__init__`` is not counted as a dependency of its submodules (Python runs
it first, but that is no edge of the design).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "relayrl"  # this checkout's package, read as text


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Each relayrl module -> the relayrl modules its import statements load (at any depth of the file)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif isinstance(node, ast.Call):
                targets.update(_dynamic_targets(node, modules))
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def _dynamic_targets(call: ast.Call, modules: dict[str, Path]) -> set[str]:
    """The relayrl modules an ``import_module(...)`` / ``__import__(...)`` call can load, from its literal prefix."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if called not in ("import_module", "__import__") or not call.args:
        return set()
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value} & set(modules)
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        prefix = str(arg.values[0].value)
        return {name for name in modules if name.startswith(prefix)} if prefix.startswith("relayrl.") else set()
    return set()


def tied_groups(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules that each reach every other one of their group (import circles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per tied group: its shortest through the
    group's first module."""
    return [_cycle_in(graph, group) for group in tied_groups(graph)]


def _cycle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    start = min(group)
    paths = {start: [start]}  # breadth first: the shortest way back to start
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def test_no_import_cycle_among_relayrl_modules():
    graph = import_graph()
    found = [f"{' -> '.join(_cycle_in(graph, group))} (tied in one circle: {', '.join(sorted(group))})"
             for group in tied_groups(graph)]
    assert not found, "import cycles among relayrl's modules (break each so imports flow one way):\n" + \
        "\n".join(found)


def test_lazy_and_dynamic_imports_are_edges():
    graph = import_graph()
    assert "relayrl.algos" in graph["relayrl.config"]  # a module-level import
    assert "relayrl.core" in graph["relayrl.algos.registry"]  # one inside a function (register's checks)
    assert {"relayrl.algos.ppo", "relayrl.algos.sac"} <= graph["relayrl.algos"]  # import_module(f"relayrl.algos.{name}")


def test_the_checker_names_a_cycle():
    graph = {"relayrl.a": {"relayrl.b"}, "relayrl.b": {"relayrl.c"}, "relayrl.c": {"relayrl.a"}, "relayrl.d": set()}
    assert cycles(graph) == [["relayrl.a", "relayrl.b", "relayrl.c", "relayrl.a"]]
    assert cycles({"relayrl.a": {"relayrl.b"}, "relayrl.b": set()}) == []
