"""The shape of the code: readable modules, no import circles, imports only downward, four packages.

The import graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from … import`` of one of our modules counts, at module level or inside a function, except
those under ``if TYPE_CHECKING:`` (they never run). ``from pkg import name`` counts as an import
of ``pkg.name`` when that is a module, else of ``pkg``.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from setuptools import find_namespace_packages

ROOT = Path(__file__).resolve().parent.parent
#: Everything outside tests/ that is Python and ours.
TOP_LEVEL = ("app", "channel", "storage", "threadbound_emulator", "bench")
#: Module size is a guideline (about 600 lines), never the reason for a split; this is the hard stop.
MAX_LINES = 1000

#: app's layers, lowest first (see app/__init__.py); a module may import its own group and those
#: listed for it. ``base`` is app.settings, app.logs, app.traces and app.clicks (and the bare
#: ``app`` package).
APP_GROUPS: dict[str, frozenset[str]] = {
    "base": frozenset({"base"}),
    "agent": frozenset({"base", "agent"}),
    "runs": frozenset({"base", "agent", "runs"}),
    "intake": frozenset({"base", "agent", "runs", "intake"}),
    # The composition root and operations may import anything but the playground and the CLI.
    "service": frozenset({"base", "agent", "runs", "intake", "ops", "service"}),
    "ops": frozenset({"base", "agent", "runs", "intake", "ops", "service"}),
    "playground": frozenset({"base", "agent", "runs", "intake", "ops", "service", "playground"}),
    "main": frozenset({"base", "agent", "runs", "intake", "ops", "service", "playground", "main"}),
}


def _module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in TOP_LEVEL:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name ``module`` imports at run time (absolute, relative ones resolved)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]

    def walk(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    yield from walk_one(other)
            else:
                yield from walk_one(child)

    def walk_one(node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                yield f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
        else:
            yield from walk(node)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")))


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Our modules, each with the set of our modules it imports."""
    graph: dict[str, frozenset[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for name in _imported_names(module, path):
            parts = name.split(".")
            while parts and ".".join(parts) not in MODULES:
                parts.pop()
            if parts and ".".join(parts) != module:
                targets.add(".".join(parts))
        graph[module] = frozenset(targets)
    return graph


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _app_group(module: str) -> str:
    parts = module.split(".")
    if module in ("app", "app.settings", "app.logs", "app.traces", "app.clicks"):
        return "base"
    if module == "app.__main__":
        return "main"
    if module == "app.serving":  # the composition root's process life
        return "service"
    return parts[1]


def _direction_error(source: str, target: str) -> str | None:
    """Why ``source`` may not import ``target``, or None when it may."""
    src_top, dst_top = source.split(".")[0], target.split(".")[0]
    order = {"storage": 0, "channel": 1, "app": 2}
    if src_top == "threadbound_emulator" and dst_top != src_top:
        return "the emulator stands alone: it imports none of app, channel, storage, bench"
    if dst_top == "bench" and src_top != "bench":
        return "nothing imports bench (it runs from the repository)"
    if dst_top == "threadbound_emulator" and src_top == "app" and not source.startswith("app.playground"):
        return "in app, only the playground runs the emulator"
    if dst_top == "threadbound_emulator" and src_top in ("channel", "storage"):
        return "channel and storage never import the emulator"
    if src_top in order and dst_top in order and order[dst_top] > order[src_top]:
        return f"{src_top} may not import {dst_top} (app → channel → storage)"
    if src_top == "channel" and target.startswith("channel.slack") and not source.startswith("channel.slack"):
        return "channel is provider-neutral: only channel.slack imports channel.slack"
    if src_top == "app" and dst_top == "app":
        src_group, dst_group = _app_group(source), _app_group(target)
        if dst_group not in APP_GROUPS[src_group]:
            return f"app.{src_group} may not import app.{dst_group} (see app/__init__.py)"
    return None


def test_no_module_over_the_line_limit() -> None:
    """No module outside tests is longer than 1,000 lines (about 600 is the guideline)."""
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these by concept into modules named for what they hold: {over}"


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a circle (TYPE_CHECKING imports aside)."""
    assert _cycles(import_graph()) == []


def test_imports_go_downward() -> None:
    """app → channel → storage and app's packages in their order (intake → runs → agent → base), never
    back up; only channel.slack imports channel.slack; the emulator and bench stand apart."""
    wrong = {
        (source, target): why
        for source, targets in import_graph().items()
        for target in targets
        if (why := _direction_error(source, target)) is not None
    }
    assert not wrong, wrong


def test_installed_packages_do_not_import_tests() -> None:
    """Test support lives with the tests: no installed module imports it (bench, run from the
    repository, may)."""
    offenders = [
        (module, name)
        for module, path in MODULES.items()
        if not module.startswith("bench")
        for name in _imported_names(module, path)
        if name == "tests" or name.startswith("tests.")
    ]
    assert offenders == []


def test_every_app_package_says_what_it_holds_and_may_import() -> None:
    """Each of app's packages has an ``__init__`` docstring naming what it may import."""
    for init in sorted((ROOT / "app").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "import" in doc, f"{init.relative_to(ROOT)}: say what the package holds and may import"


def test_only_the_four_packages_are_installed() -> None:
    """pip installs app, channel, storage and threadbound_emulator, and no other top-level package."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    assert find.get("namespaces", True), "channel has no __init__.py: it is found as a namespace package"
    where = str(ROOT / find.get("where", ["."])[0])
    packages = find_namespace_packages(where=where, include=find["include"], exclude=find.get("exclude", ()))
    assert {name.split(".")[0] for name in packages} == {"app", "channel", "storage", "threadbound_emulator"}
    assert "channel.session" in packages and "channel.slack" in packages
