"""Layout rules of the source tree: every package is installed, project modules import each other without
cycles, function-level imports of project modules say why, no private names cross modules, every package
docstring says what it owns and may import, every role package imports only what ARCHITECTURE.md's table says it
may, and modules and functions stay small.

Everything but the first test is pure AST and filesystem work.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import runpy
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="hwbench_setup")
#: Installed package name -> top-level folder, as setup.py installs them.
ROOTS: dict[str, str] = SETUP["ROOTS"]
PROJECT_TOPS = {package.split(".")[0] for package in ROOTS}
ROLE_PACKAGES = ("core", "sensors", "run", "results", "decide", "probes", "compile", "cli", "collective", "report")
MAX_MODULE, MAX_FUNCTION = 450, 100  # lines

ImportNode = ast.Import | ast.ImportFrom
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


class Source(NamedTuple):
    """One project file: its path, its module name as installed, and its syntax tree."""

    path: Path
    module: str
    tree: ast.Module

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def walk_sources() -> Iterator[Source]:
    """Every ``.py`` file under the three installed folders, with its installed module name and tree."""
    for package, folder in ROOTS.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            parts = rel.with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield Source(path, ".".join((package, *parts)), ast.parse(path.read_text(), filename=str(path)))


@cache
def sources() -> tuple[Source, ...]:
    return tuple(walk_sources())


@cache
def modules() -> frozenset[str]:
    return frozenset(source.module for source in sources())


def walk_imports(node: ast.AST, in_func: bool = False, in_tc: bool = False) -> Iterator[tuple[ImportNode, bool, bool]]:
    """(import node, inside a function?, inside ``if TYPE_CHECKING:``?) for every import anywhere under node."""
    in_func = in_func or isinstance(node, FunctionNode)
    tc_test = isinstance(node, ast.If) and "TYPE_CHECKING" in {getattr(node.test, n, None) for n in ("id", "attr")}
    for field, value in ast.iter_fields(node):
        checking = in_tc or (tc_test and field == "body")
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ImportNode):
                yield child, in_func, checking
            elif isinstance(child, ast.AST):
                yield from walk_imports(child, in_func, checking)


def import_base(source: Source, node: ast.ImportFrom) -> str:
    """The absolute module name ``from ... import`` reads from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = source.module.split(".")[: None if source.path.name == "__init__.py" else -1]  # the importer's package
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def import_targets(source: Source, node: ImportNode) -> list[str]:
    """The project modules one import statement names explicitly (implicit parent packages left out)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules()]
    base = import_base(source, node)
    found = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules()]
    if len(found) < len(node.names) and base in modules():
        found.append(base)
    return found


def imports_project(node: ImportNode) -> bool:
    names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return (isinstance(node, ast.ImportFrom) and node.level > 0) or any(
        name.split(".")[0] in PROJECT_TOPS for name in names
    )


def comment_lines(path: Path) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return {token.start[0] for token in tokens if token.type == tokenize.COMMENT}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            at = stack.index(node)
            found.append(sorted(stack[at:]))
            del stack[at:]

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_package_folder_is_installed() -> None:
    discovered = {name: Path(folder).resolve() for name, folder in SETUP["discover"]().items()}
    problems: list[str] = []
    for package, folder in ROOTS.items():
        base = ROOT / folder
        folders = {path.parent for path in base.rglob("*.py") if "__pycache__" not in path.relative_to(base).parts}
        for found in sorted(folders):
            rel, name = found.relative_to(ROOT).as_posix(), ".".join((package, *found.relative_to(base).parts))
            if not (found / "__init__.py").is_file():
                problems.append(f"{rel}/: holds .py files but has no __init__.py, so {name} is not installed")
            elif discovered.get(name) != found.resolve():
                problems.append(f"{rel}/: setup.discover() does not list it as {name}")
    for name, folder in sorted(discovered.items()):
        try:
            module_file = importlib.import_module(name).__file__
        except Exception as error:  # any failure to import is the finding
            problems.append(f"{name}: import failed: {type(error).__name__}: {error}")
            continue
        if module_file is None or Path(module_file).resolve().parent != folder:
            problems.append(f"{name}: imports from {module_file}, not from {folder.relative_to(ROOT)}/")
    assert not problems, "Package folders not installed as packages:\n" + "\n".join(problems)


def test_no_import_cycles_among_project_modules() -> None:
    graph: dict[str, set[str]] = {module: set() for module in modules()}
    where: dict[tuple[str, str], list[str]] = {}
    for source in sources():
        for node, _, in_type_checking in walk_imports(source.tree):
            if in_type_checking:
                continue
            for target in import_targets(source, node):
                graph[source.module].add(target)
                where.setdefault((source.module, target), []).append(f"{source.rel}:{node.lineno}")
    cycles = [c for c in strongly_connected(graph) if len(c) > 1 or c[0] in graph[c[0]]]
    report = []
    for cycle in cycles:
        edges = [f"    {a} -> {b} ({', '.join(where[a, b])})" for a in cycle for b in sorted(graph[a]) if b in cycle]
        report.append(f"  cycle among {', '.join(cycle)}:\n" + "\n".join(edges))
    assert not cycles, f"{len(cycles)} import cycle(s) among project modules:\n" + "\n".join(report)


def test_function_level_imports_of_own_modules_say_why() -> None:
    offenders: list[str] = []
    for source in sources():
        comments = comment_lines(source.path)
        lines = source.path.read_text().splitlines()
        for node, in_function, _ in walk_imports(source.tree):
            if not in_function or not imports_project(node):
                continue
            if not comments & set(range(node.lineno - 1, (node.end_lineno or node.lineno) + 1)):
                offenders.append(f"{source.rel}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not offenders, (
        "Function-level imports of project modules without a comment saying why (same line or line above):\n"
        + "\n".join(offenders)
    )


def test_no_private_names_imported_across_modules() -> None:
    offenders: list[str] = []
    for source in sources():
        for node, _, _ in walk_imports(source.tree):
            if not isinstance(node, ast.ImportFrom) or not imports_project(node):
                continue
            base = import_base(source, node)
            private = [
                alias.name
                for alias in node.names
                if alias.name.startswith("_")
                and not (alias.name.startswith("__") and alias.name.endswith("__"))
                and f"{base}.{alias.name}" not in modules()  # a private submodule is not a name of base
            ]
            if private and base != source.module:
                offenders.append(f"{source.rel}:{node.lineno}: from {base} import {', '.join(private)}")
    assert not offenders, "Private names imported from another module:\n" + "\n".join(offenders)


def test_every_package_says_what_it_owns_and_may_import() -> None:
    packages = {s.path.parent.relative_to(ROOT).as_posix(): s for s in sources() if s.path.name == "__init__.py"}
    problems: list[str] = []
    for rel, source in sorted(packages.items()):
        if rel.split("/")[0] != "hwbench":
            continue
        docstring = ast.get_docstring(source.tree)
        if not docstring:
            problems.append(f"{rel}/__init__.py: no module docstring")
        elif rel.removeprefix("hwbench/") in ROLE_PACKAGES and "May import" not in docstring:
            problems.append(f"{rel}/__init__.py: docstring does not say what it 'May import'")
    problems += [
        f"hwbench/{role}/__init__.py: role package missing"
        for role in ROLE_PACKAGES
        if f"hwbench/{role}" not in packages
    ]
    assert not problems, "Package docstrings:\n" + "\n".join(problems)


def function_sizes(node: ast.AST, prefix: str = "") -> Iterator[tuple[int, str]]:
    """(length in lines, qualified name) of every function and method under node."""
    for child in ast.iter_child_nodes(node):
        name = prefix
        if isinstance(child, FunctionNode | ast.ClassDef):
            name = f"{prefix}{child.name}"
            if isinstance(child, FunctionNode):
                yield (child.end_lineno or child.lineno) - child.lineno + 1, f"{name} (line {child.lineno})"
                name += ".<locals>"
            name += "."
        yield from function_sizes(child, name)


def may_import_table() -> dict[str, list[str] | None]:
    """ARCHITECTURE.md's table: role package -> the project packages it may import (None: everything)."""
    text = (ROOT / "ARCHITECTURE.md").read_text().split("\n| package |", 1)[1]
    table: dict[str, list[str] | None] = {}
    for line in text.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        table[cells[0].strip("`")] = None if cells[-1] == "everything" else re.findall(r"`(\w+)`", cells[-1])
    return table


def forbidden_imports(table: dict[str, list[str] | None]) -> list[str]:
    """``file:line -> module`` for every import of a project package the importer's row does not allow
    (``hwbench`` itself, for ``__version__``, is allowed everywhere)."""
    found = []
    for source in sources():
        parts = source.module.split(".")
        if parts[0] != "hwbench" or len(parts) < 2 or parts[1] not in table:
            continue
        allowed = table[parts[1]]
        if allowed is None:
            continue
        for node, _, _ in walk_imports(source.tree):
            for target in import_targets(source, node):
                top = target.split(".")[1] if "." in target else None
                if top is not None and top not in (parts[1], *allowed):
                    found.append(f"{source.rel}:{node.lineno} -> {target}")
    return found


def test_imports_follow_the_may_import_table() -> None:
    table = may_import_table()
    assert set(ROLE_PACKAGES) <= set(table), f"ARCHITECTURE.md's table lacks {set(ROLE_PACKAGES) - set(table)}"
    assert not forbidden_imports(table), forbidden_imports(table)


def test_the_may_import_check_finds_a_forbidden_import() -> None:
    table = may_import_table()
    assert forbidden_imports({**table, "results": ["core"]}), "results imports run and sensors: the check saw neither"


def test_modules_and_functions_stay_small() -> None:
    module_sizes = sorted(((len(s.path.read_text().splitlines()), s.rel) for s in sources()), reverse=True)
    functions = sorted(
        ((size, f"{s.rel}:{name}") for s in sources() for size, name in function_sizes(s.tree)), reverse=True
    )
    too_long = [f"  module {rel}: {n} lines (max {MAX_MODULE})" for n, rel in module_sizes if n > MAX_MODULE]
    too_long += [f"  function {name}: {n} lines (max {MAX_FUNCTION})" for n, name in functions if n > MAX_FUNCTION]
    largest = ["largest modules:", *(f"  {rel}: {n}" for n, rel in module_sizes[:5])]
    largest += ["largest functions:", *(f"  {name}: {n}" for n, name in functions[:5])]
    assert not too_long, "Too long:\n" + "\n".join(too_long) + "\n" + "\n".join(largest)
