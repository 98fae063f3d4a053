"""`.env.example` lists exactly the settings the app reads, and works as a `.env` as it is."""

from __future__ import annotations

import re
from pathlib import Path

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / ".env.example"
#: A setting's line, set (``NAME=value``) or showing its default (``# NAME=value``).
LINE = re.compile(r"^(?:# )?([A-Z][A-Z0-9_]*)=(.*)$")


def listed() -> list[str]:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    return [m.group(1) for line in lines if (m := LINE.match(line))]


def test_env_example_lists_every_setting_once() -> None:
    """Every field of the settings model has one line in .env.example, and nothing else does."""
    names = listed()
    expected = {name.upper() for name in Settings.model_fields}
    assert len(names) == len(set(names)), "a setting is listed twice in .env.example"
    assert sorted(expected - set(names)) == [], "add these settings to .env.example"
    assert sorted(set(names) - expected) == [], "these lines of .env.example name no setting"


def test_env_example_loads_as_a_dotenv_file() -> None:
    """Copied to .env unchanged, the example is valid settings (empty required values, else defaults)."""
    settings = Settings(_env_file=EXAMPLE)  # type: ignore[call-arg]
    assert settings.port == 3000 and settings.model == ""


def test_commented_defaults_are_the_real_defaults() -> None:
    """A commented `# NAME=value` line shows the value the app uses when NAME is unset."""
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        m = LINE.match(line)
        if m is None or not line.startswith("# ") or not m.group(2):
            continue
        name, value = m.group(1), m.group(2)
        shown = Settings(_env_file=None, **{name.lower(): value})  # type: ignore[call-arg]
        assert getattr(shown, name.lower()) == getattr(defaults, name.lower()), name
