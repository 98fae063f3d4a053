"""The crash points the product code passes, found by reading its source (not its registry).

``crash_point("store.claim.before")`` names its point plainly; ``crash_point(f"slack.{kind}.before")``
names one per value ``kind`` can take, read from the function that calls it: the string constants
assigned to ``kind`` there (``kind = "checkpoint" if run_open else "save"``), or the values of the
module-level table it is looked up in (``kind = CRASH_KINDS.get(method)``). A name this cannot
resolve raises, so a new kind of call is noticed rather than skipped. The crash matrix compares what
this finds with its rows (``tests/test_crash_matrix.py``).
"""

from __future__ import annotations

import ast
import importlib
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class Unresolved(Exception):
    """A crash point whose name this module cannot work out from the source."""


def crash_points_in(root: Path, packages: Iterable[str]) -> dict[str, list[str]]:
    """Every point name the code under ``root/<package>`` passes, with where (``path:line``)."""
    found: dict[str, list[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            for name, line in _points_of(ast.parse(path.read_text()), module):
                found.setdefault(name, []).append(f"{path.relative_to(root)}:{line}")
    return found


def _points_of(tree: ast.Module, module: str) -> Iterable[tuple[str, int]]:
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "crash_point" and node.args):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield arg.value, node.lineno
        elif isinstance(arg, ast.JoinedStr):
            scope = _enclosing(functions, node) or tree
            for name in _expand(arg, scope, module):
                yield name, node.lineno
        else:
            raise Unresolved(f"{module}:{node.lineno}: crash_point called with {ast.dump(arg)}")


def _enclosing(functions: list[Any], node: ast.AST) -> ast.AST | None:
    """The innermost function whose body holds ``node``."""
    holding = [f for f in functions if any(n is node for n in ast.walk(f))]
    return min(holding, key=lambda f: len(list(ast.walk(f))), default=None)


def _expand(text: ast.JoinedStr, scope: ast.AST, module: str) -> list[str]:
    pieces: list[list[str]] = []
    for part in text.values:
        if isinstance(part, ast.Constant):
            pieces.append([str(part.value)])
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
            pieces.append(_values_of(part.value.id, scope, module))
        else:
            raise Unresolved(f"{module}: a crash point's name is built from {ast.dump(part)}")
    return ["".join(combo) for combo in itertools.product(*pieces)]


def _values_of(name: str, scope: ast.AST, module: str) -> list[str]:
    """The strings ``name`` may hold in ``scope``: constants assigned to it, or a module table's values."""
    values: list[str] = []
    for node in ast.walk(scope):
        source: ast.AST | None = None
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            source = node.value
        elif isinstance(node, (ast.For, ast.AsyncFor)) and getattr(node.target, "id", "") == name:
            source = node.iter
        if source is None:
            continue
        for inner in ast.walk(source):
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                values.append(inner.value)
            elif isinstance(inner, ast.Name) and inner.id.isupper():
                values.extend(_table(module, inner.id))
    if not values:
        raise Unresolved(f"{module}: cannot tell what {name!r} holds in a crash point's name")
    return sorted(set(values))


def _table(module: str, name: str) -> list[str]:
    table = getattr(importlib.import_module(module), name)
    items = table.values() if isinstance(table, dict) else table
    return [str(v) for v in items]
