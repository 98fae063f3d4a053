"""The documentation agrees with the code: settings, code map, site nav, README, example agent file."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import SecretStr

from app.agent.agent_file import AgentFile
from app.settings import Settings
from channel.tools import CATALOG

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: The packages whose every module the architecture page's code map lists.
MAPPED = ("app", "channel", "storage", "threadbound_emulator")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _section(markdown: str, heading: str) -> str:
    """The text under a ``## heading``, up to the next heading of the same level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def _setting_rows() -> list[list[str]]:
    """The configuration reference's table rows, as cells."""
    lines = _read(DOCS / "configuration.md").splitlines()
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines if line.startswith("| `")]


def documented_settings() -> list[str]:
    """The variables in the configuration reference's table: the first cell of each row."""
    return [name for row in _setting_rows() for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row[0])]


def test_configuration_reference_lists_every_setting() -> None:
    """Every variable of the settings model has a row in docs/configuration.md; every row is a variable."""
    documented = documented_settings()
    model = {name.upper() for name in Settings.model_fields}
    assert sorted(set(documented) - model) == [], "documented but not in app/settings.py"
    assert sorted(model - set(documented)) == [], "in app/settings.py but not in docs/configuration.md"
    assert len(documented) == len(set(documented)), "a variable documented twice"


def _same_default(cell: str, default: object) -> bool:
    """Whether a documented default (the first backticked value of the cell) is the model's default."""
    shown = re.match(r"`([^`]*)`", cell)
    if shown is None:
        return False
    value = shown.group(1)
    if isinstance(default, bool):
        return value == str(default).lower()
    if isinstance(default, int | float):
        return float(value) == float(default)
    if isinstance(default, Path):
        return Path(value) == default
    if isinstance(default, tuple):
        return value == ",".join(default)
    return value == default


def test_configuration_reference_shows_the_defaults() -> None:
    """Each documented default is the settings model's default; settings without one show none."""
    for row in _setting_rows():
        (name,) = re.findall(r"`([A-Z][A-Z0-9_]+)`", row[0])
        default = Settings.model_fields[name.lower()].default
        if isinstance(default, SecretStr):
            default = default.get_secret_value()
        if default in ("", (), None):
            continue  # required, or derived from others (DATABASE_URL, AGENT_FILE): the cell says how
        assert _same_default(row[1], default), f"{name}: documented {row[1]!r}, the model says {default!r}"


def mapped_modules() -> list[str]:
    """The modules the code map lists: every backticked ``….py`` path opening a list item."""
    code_map = _section(_read(DOCS / "architecture.md"), "Code map")
    return re.findall(r"^- `([\w/]+\.py)` — ", code_map, re.M)


def test_code_map_matches_the_tree() -> None:
    """The architecture page's code map lists every module of the installed packages once, and no other."""
    listed = mapped_modules()
    tree = {
        path.relative_to(ROOT).as_posix()
        for package in MAPPED
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sorted(tree - set(listed)) == [], "modules missing from the code map in docs/architecture.md"
    assert sorted(set(listed) - tree) == [], "the code map lists modules that do not exist"
    assert len(listed) == len(set(listed)), "a module listed twice"


def nav_pages() -> list[str]:
    """The pages named in mkdocs.yml's nav (``Title: page.md`` entries)."""
    text = _read(ROOT / "mkdocs.yml")
    nav = text[text.index("\nnav:") :]
    return re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M)


def test_every_page_is_in_the_nav() -> None:
    """Every page under docs/ is in the site's navigation, and the navigation names only pages that exist."""
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    nav = nav_pages()
    assert sorted(pages - set(nav)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - pages) == [], "mkdocs.yml's nav names pages that do not exist"


def test_no_internal_issue_numbers_in_user_docs() -> None:
    """User documentation never cites the project's internal issue or invariant numbers."""
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        found = re.findall(r"\b(?:issue|invariant) \d+", _read(path), re.I)
        assert found == [], f"{path.relative_to(ROOT)} cites {found}"


def readme_commands() -> list[str]:
    """The commands of the README's first code block, comments left out."""
    block = re.search(r"```bash\n(.*?)```", _read(ROOT / "README.md"), re.S)
    assert block, "README.md has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_readme_starts_with_the_two_commands() -> None:
    """The README's first code block is the install-and-serve command, then the install-and-test command."""
    serve, test = readme_commands()[:2]
    assert serve.endswith("pip install -e . && python -m app serve")
    assert test.endswith("pip install -e '.[test]' && python -m pytest -q -rs -n 4 --dist worksteal")


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run runs the README's test command exactly as written, so the two cannot drift apart."""
    test = readme_commands()[1]
    ci_lines = [line.strip() for line in _read(ROOT / ".ci" / "run").splitlines()]
    assert test in ci_lines
    assert any(line.startswith("mkdocs build --strict") for line in ci_lines)


def test_readme_is_short() -> None:
    """The README is a front door of about 200 lines; the rest lives in docs/."""
    assert len(_read(ROOT / "README.md").splitlines()) <= 230


def test_agent_example_is_valid() -> None:
    """agent.example.toml loads as an agent file with every kind of entry, naming tools that exist."""
    agent = AgentFile.load(ROOT / "agent.example.toml")
    assert agent.instructions.strip()
    assert agent.model.partition(":")[0] in ("openai", "openai-chat", "anthropic")
    assert agent.tools and agent.approval and agent.prompts
    assert [server.name for server in agent.mcp] == ["tickets"]
    mcp_prefixes = tuple(f"{server.name}_" for server in agent.mcp)
    for entry in (*agent.tools, *agent.approval):
        assert entry in CATALOG or entry.startswith(mcp_prefixes), entry
    assert (ROOT / agent.mcp[0].command[-1]).is_file()


def test_every_command_is_in_the_command_tables() -> None:
    """Every subcommand of ``python -m app`` has a row in the README's Commands table and in the
    operations page's, so a new command cannot ship undocumented."""
    import argparse

    from app.__main__ import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(sub.choices)
    for path, heading in ((ROOT / "README.md", "Commands"), (DOCS / "operations.md", None)):
        text = _read(path) if heading is None else _section(_read(path), heading)
        listed = set(re.findall(r"^\| `python -m app ([a-z-]+)", text, re.M))
        assert commands <= listed, f"{path.name} lacks {sorted(commands - listed)}"
