"""The shape of the code by concept: no class cut into files, no Slack outside its adapter, short
functions, comments that stand on their own.

Read from the source with ``ast`` like ``tests/test_layout.py`` (nothing is imported).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from functools import cache
from pathlib import Path

from tests.test_layout import MODULES, ROOT

#: Product code: the app, the channel and the store (bench runs from the repository and the emulator is
#: a test double: both are held to the text rules below, not to the class rule).
PRODUCT = {
    name: path for name, path in MODULES.items() if name.partition(".")[0] in {"app", "channel", "storage"}
}
#: Where nothing of Slack may appear: the runs, the agent and the provider-neutral channel.
NEUTRAL_PREFIXES = ("app.runs", "app.agent", "channel")
#: Slack's own packages and our adapter.
SLACK_MODULES = ("slack_sdk", "slack_bolt", "channel.slack")
#: Block Kit element types: a ``{"type": …}`` literal with one of these is Block Kit drawn by hand.
BLOCK_KIT_TYPES = frozenset(
    {
        "section",
        "actions",
        "button",
        "mrkdwn",
        "plain_text",
        "context",
        "header",
        "divider",
        "rich_text",
        "rich_text_section",
        "input",
        "static_select",
        "overflow",
        "markdown",
    }
)
MAX_FUNCTION_LINES = 80
#: A reference to a numbered item of a document the repository does not hold.
NUMBERED_REFERENCE = re.compile(r"\b(?:issue|invariant)s?\s*#?\d+", re.IGNORECASE)
DOTTED = re.compile(r"\b(?:app|channel|storage|threadbound_emulator)(?:\.[A-Za-z_]\w*)+")


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _neutral(module: str) -> bool:
    return module.startswith(NEUTRAL_PREFIXES) and not module.startswith("channel.slack")


@cache
def _top_level_names(module: str) -> frozenset[str]:
    """The names a module defines or imports at its top level (a star import brings the other's)."""
    names: set[str] = set()
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in _tree(MODULES[module]).body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            source = f"{package}.{node.module}" if node.level else (node.module or "")
            if source in MODULES:
                names |= _top_level_names(source)
            continue
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom | ast.Import):
                    names.update((a.asname or a.name).split(".")[0] for a in inner.names)
                elif isinstance(inner, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(inner.name)
                elif isinstance(inner, ast.Assign):
                    names.update(t.id for t in inner.targets if isinstance(t, ast.Name))
    return frozenset(names)


@cache
def _classes() -> dict[tuple[str, str], ast.ClassDef]:
    return {
        (module, node.name): node
        for module, path in PRODUCT.items()
        for node in _tree(path).body
        if isinstance(node, ast.ClassDef)
    }


def _base_origin(module: str, base: ast.expr) -> tuple[str, str] | None:
    """Which of our modules' classes ``base`` names (through this module's imports), if any."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    target = base.value if isinstance(base, ast.Subscript) else base
    if isinstance(target, ast.Name):
        name = target.id
        if (module, name) in _classes():
            return module, name
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parts = package.split(".")
                    source = ".".join([*parts[: len(parts) - node.level + 1], *([source] if source else [])])
                for alias in node.names:
                    if (alias.asname or alias.name) == name and source in MODULES:
                        return _defined_in(source, alias.name)
    return None


def _defined_in(module: str, name: str) -> tuple[str, str] | None:
    """Where ``module``'s name ``name`` is defined, following re-exports within our packages."""
    if (module, name) in _classes():
        return module, name
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _tree(path).body:
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                source = ".".join([*parts[: len(parts) - node.level + 1], *([source] if source else [])])
            if source in MODULES and any((a.asname or a.name) in (name, "*") for a in node.names):
                found = _defined_in(source, name)
                if found:
                    return found
    return None


def test_no_class_is_cut_into_files() -> None:
    """No class inherits from a base defined in another of our modules that nothing else inherits
    from: a class too big for its file becomes an owner of named parts, not a chain of bases
    (Protocols aside: they are contracts, not halves of a class)."""
    subclasses: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (module, name), node in _classes().items():
        for base in node.bases:
            origin = _base_origin(module, base)
            if origin is not None:
                subclasses[origin].append(f"{module}.{name}")
    cut = [
        f"{subs[0]} inherits {base_module}.{name}, which nothing else does"
        for (base_module, name), subs in subclasses.items()
        if len(subs) == 1
        and subs[0].rpartition(".")[0] != base_module
        and not any(ast.unparse(b).endswith("Protocol") for b in _classes()[base_module, name].bases)
    ]
    assert not cut, cut


def test_no_slack_outside_its_adapter() -> None:
    """The runs, the agent and the channel outside ``channel.slack`` import nothing of Slack and draw
    no Block Kit: a second platform reuses them whole."""
    from tests.test_layout import _imported_names

    wrong = []
    for module, path in PRODUCT.items():
        if not _neutral(module):
            continue
        for name in _imported_names(module, path):
            if name.startswith(SLACK_MODULES):
                wrong.append(f"{module} imports {name}")
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (
                        isinstance(key, ast.Constant)
                        and key.value == "type"
                        and isinstance(value, ast.Constant)
                        and value.value in BLOCK_KIT_TYPES
                    ):
                        wrong.append(f"{module}:{node.lineno} draws Block Kit ({value.value!r})")
    assert not wrong, wrong


def test_no_long_functions() -> None:
    """No function in product code is longer than 80 lines: a long flow becomes named steps."""
    long = [
        f"{module}.{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for module, path in PRODUCT.items()
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_no_numbered_references() -> None:
    """No comment or docstring says "issue N" or "invariant N": invariants are named (their sections
    are in docs/architecture.md) and the issue tracker is not in the repository."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in MODULES.values()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NUMBERED_REFERENCE.search(line)
    ]
    assert not found, found


def _prose(path: Path) -> str:
    """The docstrings and comments of a module: the text a reader takes on trust."""
    parts = [
        ast.get_docstring(node) or ""
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    source = io.StringIO(path.read_text(encoding="utf-8")).readline
    parts += [tok.string for tok in tokenize.generate_tokens(source) if tok.type == tokenize.COMMENT]
    return "\n".join(parts)


def test_dotted_module_names_in_the_text_resolve() -> None:
    """A dotted name of ours in a docstring or comment (``app.runs.run``, ``channel.journal.reconcile``)
    names a module that exists and, after it, a name that module defines: moved modules leave no
    stale pointers behind."""
    stale = []
    for module, path in MODULES.items():
        for match in DOTTED.finditer(_prose(path)):
            parts = match.group(0).split(".")
            found = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES), default=0)
            if found < 2 and not (found == 1 and len(parts) == 1):
                stale.append(f"{module}: {match.group(0)} (no such module)")
                continue
            rest = parts[found:]
            if rest and rest[0] not in _top_level_names(".".join(parts[:found])):
                stale.append(f"{module}: {match.group(0)} ({rest[0]} not in {'.'.join(parts[:found])})")
    assert not stale, stale
