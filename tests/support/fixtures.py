"""Real Slack payloads kept under ``tests/fixtures/slack/`` (see its README), loaded for tests.

Each file names its public source in a ``_source`` key, which :func:`load` strips so the
payload is exactly what Slack would send.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slack"


def load(name: str) -> dict[str, Any]:
    """The payload in ``tests/fixtures/slack/<name>.json``, without its ``_source`` note."""
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.pop("_source", None), str):
        raise ValueError(f"fixture {name} must be an object with a _source note")
    return data


def names() -> list[str]:
    """Every fixture's name, sorted."""
    return sorted(p.stem for p in FIXTURES.glob("*.json"))
