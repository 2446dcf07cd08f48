"""The code's shape, read from the source: no import cycle, a README module map that names every module,
callers that branch on capabilities.

Imports are read from the AST wherever they are (module level, inside functions, under TYPE_CHECKING),
so a cycle cannot hide behind a deferred import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO_ROOT

PACKAGES = ("playground", "widgets")
# A path in the module map, relative to the entry it stands in: `inbound.py`, `ui/inspect.py`.
MAP_PATH = re.compile(r"(?<![\w/.-])((?:\w+/)*\w+\.py)\b")


def modules(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name, for its __init__.py)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lies inside."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imported(node: ast.Import | ast.ImportFrom, module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules one import statement loads; `from pkg import mod` names the submodule."""
    if isinstance(node, ast.Import):
        return {owner for alias in node.names if (owner := _owner(alias.name, known))}
    base = module.split(".")
    if node.level:
        base = base if path.name == "__init__.py" else base[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    found = set()
    for alias in node.names:
        owner = f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else _owner(source, known)
        if owner:
            found.add(owner)
    return found


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other modules of the packages, from every import statement in it."""
    graph = {}
    for module, path in known.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= _imported(node, module, path, known)
        graph[module] = edges - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth first, each module finished once)."""
    done: set[str] = set()
    for start in sorted(graph.keys() - done):
        path, on_path = [start], {start}
        stack = [(start, iter(sorted(graph[start])))]
        while stack:
            node, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
                on_path.add(nxt)
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph(modules())
    assert graph["playground.ui"] >= {"playground.ui.layout"}, "the graph lost the ui package's own imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the packages' top-level parts (`playground.decoding`, `playground.errors`)."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        packages.setdefault(part(module), set()).update(part(e) for e in edges if part(e) != part(module))
    return packages


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's floor in an acyclic graph: 1 for what imports nothing, else one above its highest import."""
    floor: dict[str, int] = {}

    def visit(node: str) -> int:
        if node not in floor:
            floor[node] = 1 + max((visit(e) for e in graph.get(node, ())), default=0)
        return floor[node]

    for node in graph:
        visit(node)
    return floor


def test_packages_import_each_other_without_a_cycle_and_stand_at_most_ten_floors():
    packages = package_graph(import_graph(modules()))
    assert packages["playground.decoding"] >= {"playground.constraints"}, "the package graph lost decoding's imports"
    cycle = find_cycle(packages)
    assert cycle is None, "package cycle: " + " -> ".join(cycle)
    height = floors(packages)
    assert max(height.values()) <= 10, f"the packages stand {max(height.values())} floors: {height}"
    # The local decode path never reaches up into the debugger, the providers or the surfaces.
    below = {"playground.debug", "playground.providers", "playground.server", "playground.ui", "playground.render"}
    assert not packages["playground.decoding"] & below


def test_package_cycles_and_floors_are_read_from_modules():
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": {"p.c"}, "p.c": set(), "p.b.z": {"p.a.w"}, "p.a.w": set()}
    packages = package_graph(graph)
    assert packages == {"p.a": {"p.b"}, "p.b": {"p.c", "p.a"}, "p.c": set()}
    assert find_cycle(packages) == ["p.a", "p.b", "p.a"]
    assert floors({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"c"}}) == {"a": 3, "b": 2, "c": 1, "d": 2}


def test_function_level_and_relative_imports_count(tmp_path):
    pkg = tmp_path / "playground"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("def f():\n    from playground.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n")
    (tmp_path / "widgets").mkdir()
    graph = import_graph(modules(tmp_path))
    assert graph["playground.sub"] == {"playground.sub.b"}
    assert find_cycle(graph) == ["playground.a", "playground.sub.b", "playground.a"]


def module_map(readme: str) -> set[str]:
    """The files and folders (`dir/`) the README's module map names under the packages.

    The map is the first code block of "## Development": a name at the margin or indented by two starts
    an entry (`dir/` opens a folder), deeper lines continue it, and every `x.py` in an entry lies in its folder.
    """
    section = re.search(r"^## Development$(.*)", readme, flags=re.M | re.S)
    assert section, "the README has no Development section"
    block = section.group(1).split("```\n", 2)[1]
    named, top, here = set(), "", ""
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        head = line.split(maxsplit=1)[0] if line.strip() else ""
        if indent in (0, 2):
            folder = head if head.endswith("/") else ""
            top, here = (folder, folder) if indent == 0 else (top, top + folder)
            named.add(here)
        named |= {here + path for path in MAP_PATH.findall(line)}
    # A file named in a subfolder (`backends/base.py`) names that folder too.
    named |= {path.rpartition("/")[0] + "/" for path in named if path.endswith(".py")}
    return {path for path in named if path.startswith(tuple(f"{p}/" for p in PACKAGES))}


def test_the_readme_module_map_names_every_module_and_nothing_else():
    files = {path.relative_to(REPO_ROOT).as_posix() for path in modules().values()}
    # A folder stands for its __init__.py (namespace packages have none).
    tree = {f for f in files if not f.endswith("/__init__.py")} | {f.rpartition("/")[0] + "/" for f in files}
    named = module_map((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    missing, extra = sorted(tree - named), sorted(named - tree)
    assert not missing, f"modules missing from the README's module map: {missing}"
    assert not extra, f"modules the README's module map names that do not exist: {extra}"


def test_module_map_entries_own_their_continuation_lines():
    readme = """## Development

```
app.py            entry point;  x.py  ignored
playground/       the library
  a.py            one;  b.py  two, see ui/c.py
  wire/           d.py (shapes),
                  e.py (bodies), sub/g.py
widgets/          f.py, static/
tests/            fakes.py
```
"""
    assert module_map(readme) == {
        "playground/",
        "playground/a.py",
        "playground/b.py",
        "playground/ui/",
        "playground/ui/c.py",
        "playground/wire/",
        "playground/wire/d.py",
        "playground/wire/e.py",
        "playground/wire/sub/",
        "playground/wire/sub/g.py",
        "widgets/",
        "widgets/f.py",
    }


def test_callers_branch_on_capabilities_not_provider_names_or_classes():
    """Only the registry's factory (providers/config.py: _make_provider) may look at a provider's class."""
    pattern = re.compile(r"provider_type\.startswith|isinstance\(.*Provider|hasattr\(provider|getattr\(provider")
    factory = REPO_ROOT / "playground" / "providers" / "config.py"
    hits = []
    for path in modules().values():
        lines = path.read_text(encoding="utf-8").splitlines()
        function = ""
        for n, line in enumerate(lines, 1):
            if line.startswith("def "):
                function = line.split("(")[0][4:]
            if pattern.search(line) and not (path == factory and function == "_make_provider"):
                hits.append(f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}")
    assert hits == []


def test_every_folder_of_modules_is_a_regular_package():
    """setuptools' packages.find skips a folder without __init__.py: a built wheel would lack its modules."""
    folders = {path.parent for path in modules().values()}
    assert sorted(f.relative_to(REPO_ROOT).as_posix() for f in folders if not (f / "__init__.py").exists()) == []
