"""Check the shape of the ecoguard package: what ARCHITECTURE.md and STYLE.md ask of it.

- no import cycle between ecoguard's packages (``ecoguard.energy``, ``ecoguard.export``, ...;
  a top-level module such as ``ecoguard.config`` counts as its own package), nor between the
  modules inside one package (``ecoguard.advisor.answers`` -> ``...rendering`` -> ``...answers``);
  imports under ``if TYPE_CHECKING:`` count too: imports run one way;
- no module over 600 lines and no function over 80 lines (a table or generated text that must
  be longer says so with ``# layout: table`` on its ``def`` or first line);
- no ``try: import ... except ImportError`` around ecoguard's own modules;
- no function-local import of ecoguard's own modules, except where the line says why with a
  ``# lazy: <reason>`` comment (laziness is for heavy third-party libraries behind our module);
- ``tools/`` beside the package (scripts and their packages, which import each other by
  top-level name: ``import dashboard_panels``, ``from reference import readme``): the same
  module and function lengths, and no import cycle between its modules.

Usage: ``python tools/check_layout.py [PATH ...]`` (default: the package and tools/). Prints
one line per problem and exits 1 when there is any, 0 when there is none.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ecoguard"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
TABLE_MARK = "# layout: table"
LAZY_MARK = "# lazy:"


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(module: str) -> str:
    """``ecoguard.energy.meter`` -> ``ecoguard.energy``; ``ecoguard.config`` -> itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def imported_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The ecoguard modules an import statement names (absolute or relative)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.startswith("ecoguard")]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if not target.startswith("ecoguard"):
        return []
    if node.module is None or target == "ecoguard":
        return [f"{target}.{alias.name}" for alias in node.names]
    return [target]


def imported_module_names(node: ast.AST, module: str, is_package: bool, root: Path) -> list[str]:
    """The ecoguard modules an import statement names, to the module: ``from ecoguard.advisor
    import protocols`` names ``ecoguard.advisor.protocols`` (a module), not the package."""
    targets = imported_modules(node, module, is_package)
    if not isinstance(node, ast.ImportFrom) or node.module is None or len(targets) != 1:
        return targets
    base = targets[0]
    named = [
        f"{base}.{alias.name}" for alias in node.names if _is_module(f"{base}.{alias.name}", root)
    ]
    return named + ([base] if len(named) < len(node.names) else [])


def _is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _marked(lines: list[str], lineno: int, mark: str) -> bool:
    # the def line, a decorator line above it, or the line itself (1-based)
    window = lines[max(0, lineno - 3) : lineno + 1]
    return any(mark in line for line in window)


def _unmarked_local_import(node: ast.AST, module: str, path: Path, lines: list[str]) -> bool:
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return False
    if not imported_modules(node, module, path.name == "__init__.py"):
        return False
    statement = lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
    return not any(LAZY_MARK in line for line in statement)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(name, ast.Name) and name.id in ("ImportError", "ModuleNotFoundError")
        for name in names
    )


def length_problems(rel: str, lines: list[str], tree: ast.AST) -> list[Problem]:
    """A module over MAX_MODULE_LINES, each function over MAX_FUNCTION_LINES (unless marked)."""
    problems: list[Problem] = []
    if len(lines) > MAX_MODULE_LINES and not any(TABLE_MARK in line for line in lines[:5]):
        problems.append(Problem(rel, 1, f"module has {len(lines)} lines (> {MAX_MODULE_LINES})"))
    for function in _functions(tree):
        length = (function.end_lineno or function.lineno) - function.lineno + 1
        if length > MAX_FUNCTION_LINES and not _marked(lines, function.lineno, TABLE_MARK):
            problems.append(
                Problem(
                    rel,
                    function.lineno,
                    f"function {function.name} has {length} lines (> {MAX_FUNCTION_LINES})",
                )
            )
    return problems


def tool_imports(node: ast.AST, module: str, is_package: bool, tools: Path) -> list[str]:
    """The tools/ modules an import statement in tools/ names: ``import dashboard_panels``,
    ``from reference import readme`` (``reference.readme``), ``from .sources import SOURCES``."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = module.split(".") if is_package else module.split(".")[:-1]
        parts = base[: len(base) - (node.level - 1)] if node.level else []
        target = ".".join(parts + ([node.module] if node.module else []))
        named = [f"{target}.{a.name}" if target else a.name for a in node.names]
        named = [name for name in named if _is_module(name, tools)]
        names = named + ([target] if target and len(named) < len(node.names) else [])
    else:
        return []
    return [name for name in names if _is_module(name, tools)]


def check_tools(tools: Path, wanted: set[Path] | None = None) -> list[str]:
    """tools/: module and function lengths (of ``wanted`` files only, when given) and import
    cycles between its modules."""
    edges: dict[str, set[str]] = defaultdict(set)
    problems: list[str] = []
    for path in sorted(tools.rglob("*.py")) if tools.is_dir() else []:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        module = module_name(path, tools)
        for node in ast.walk(tree):
            for target in tool_imports(node, module, path.name == "__init__.py", tools):
                if target != module:
                    edges[module].add(target)
        if wanted is None or path.resolve() in wanted:
            rel = str(path.relative_to(tools.parent))
            found = length_problems(rel, text.splitlines(), tree)
            problems.extend(str(problem) for problem in found)
    for cycle in find_cycles(edges):
        problems.append(f"tools: import cycle between modules: {' <-> '.join(cycle)}")
    return problems


def check_file(
    path: Path,
    edges: dict[str, set[str]],
    root: Path = ROOT,
    module_edges: dict[str, set[str]] | None = None,
) -> list[Problem]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    rel = str(path.relative_to(root))
    tree = ast.parse(text, filename=rel)
    module = module_name(path, root)
    problems = length_problems(rel, lines, tree)
    for function in _functions(tree):
        for node in ast.walk(function):
            if _unmarked_local_import(node, module, path, lines):
                problems.append(
                    Problem(
                        rel,
                        node.lineno,
                        f"function-local import of ecoguard's own module in "
                        f"{function.name} (import at the top, or say why: {LAZY_MARK} ...)",
                    )
                )
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if imported_modules(inner, module, path.name == "__init__.py"):
                        problems.append(
                            Problem(
                                rel,
                                inner.lineno,
                                "ImportError guard around ecoguard's own module",
                            )
                        )
        for target in imported_modules(node, module, path.name == "__init__.py"):
            source, destination = package_of(module), package_of(target)
            if source != destination and destination != "ecoguard":
                edges[source].add(destination)
        if module_edges is not None:
            for target in imported_module_names(node, module, path.name == "__init__.py", root):
                if target != module and package_of(target) == package_of(module):
                    module_edges[module].add(target)
    return problems


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return cycles


def check(paths: Iterable[Path] | None = None, package: Path = PACKAGE) -> list[str]:
    """Every problem found in the package and in the tools/ beside it, as printable lines
    (cycles always over the whole of each). ``paths`` limits the per-file problems to those
    files."""
    edges: dict[str, set[str]] = defaultdict(set)
    module_edges: dict[str, set[str]] = defaultdict(set)
    wanted = {path.resolve() for path in paths} if paths else None
    problems: list[str] = []
    for path in sorted(package.rglob("*.py")):
        found = check_file(path, edges, package.parent, module_edges)
        if wanted is None or path.resolve() in wanted:
            problems.extend(str(problem) for problem in found)
    for cycle in find_cycles(edges):
        chain = " <-> ".join(cycle)
        problems.append(f"ecoguard: import cycle between packages: {chain}")
    for cycle in find_cycles(module_edges):
        chain = " <-> ".join(cycle)
        problems.append(f"{package_of(cycle[0])}: import cycle between modules: {chain}")
    problems.extend(check_tools(package.parent / "tools", wanted))
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(arg) for arg in args] or None
    problems = check(paths)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
