"""The files PaaS buildpacks read agree with pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _normalize(requirement: str) -> str:
    # PEP 503 name normalisation; extras and the pin are kept as written, minus spaces.
    requirement = requirement.replace(" ", "")
    match = re.match(r"([A-Za-z0-9._-]+)(.*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() + match.group(2)


def test_requirements_match_pyproject() -> None:
    """requirements.txt pins exactly pyproject's runtime dependencies, then installs the project itself."""
    lines = [
        line.strip()
        for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[-1] == "."
    declared = PYPROJECT["project"]["dependencies"]
    assert sorted(map(_normalize, lines[:-1])) == sorted(map(_normalize, declared))
    assert all("==" in line for line in lines[:-1])


def test_procfile_serves() -> None:
    """The Procfile's only process is the web server."""
    assert (ROOT / "Procfile").read_text(encoding="utf-8").strip() == "web: python -m app serve"


def test_python_version_matches_requires_python() -> None:
    """.python-version is the major version requires-python starts at (bare 3.N: patches arrive)."""
    version = (ROOT / ".python-version").read_text(encoding="utf-8").strip()
    assert re.fullmatch(r"3\.\d+", version)
    assert PYPROJECT["project"]["requires-python"] == f">={version}"


def test_no_runtime_txt() -> None:
    """No runtime.txt: Heroku's classic buildpack prefers it to .python-version; its CNB refuses it."""
    assert not (ROOT / "runtime.txt").exists()
