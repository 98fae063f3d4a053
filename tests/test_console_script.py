"""Packaging basics: the `threadbound` console script runs every command, `--version` works on each,
and the MIT license that pyproject.toml declares ships as a LICENSE file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from app.__main__ import _parser, main, version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
COMMANDS = ["serve", "playground", "run", "check", "manifest", "usage", "follow-ups", "mcp-disconnect"]
#: What the console script does (pip writes it): call main() with argv[0] being `threadbound`.
AS_SCRIPT = "import sys; sys.argv[0] = 'threadbound'; from app.__main__ import main; sys.exit(main())"


def commands() -> list[str]:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    return list(sub.choices)  # type: ignore[arg-type]


def test_the_console_script_is_the_cli() -> None:
    """pyproject.toml installs `threadbound` as app.__main__:main, the function behind `python -m app`."""
    assert PYPROJECT["project"]["scripts"] == {"threadbound": "app.__main__:main"}
    assert sorted(commands()) == sorted(COMMANDS)


@pytest.mark.process
def test_the_script_names_itself_threadbound_in_help() -> None:
    """Run as the console script, --help shows `threadbound COMMAND`, and every command is reachable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", AS_SCRIPT, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: threadbound ")
    for command in COMMANDS:
        assert command in proc.stdout


@pytest.mark.parametrize("args", [[], *([c] for c in COMMANDS)])
def test_version_works_everywhere(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--version` prints `threadbound X.Y.Z` and exits 0, alone or after any command (no settings needed)."""
    with pytest.raises(SystemExit) as done:
        main([*args, "--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"threadbound {version()}"


@pytest.mark.process
def test_the_installed_script_runs_when_present() -> None:
    """Where the package is installed (CI's venv), the `threadbound` executable answers --version."""
    script = Path(sys.executable).parent / "threadbound"
    found = script if script.exists() else shutil.which("threadbound")
    if found is None:
        pytest.skip("the threadbound script is not installed here (pip install -e . installs it)")
    proc = subprocess.run([str(found), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("threadbound ")


def test_license_file_matches_pyproject() -> None:
    """pyproject.toml says MIT and the repository ships the MIT license text."""
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and 'THE SOFTWARE IS PROVIDED "AS IS"' in text
