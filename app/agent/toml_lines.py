"""Where a key sits in a TOML file, so a mistake in the agent file is named with its line."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["located", "toml_line"]

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def toml_line(path: Path, key: str | None, table: str | None = None) -> int | None:
    """The 1-based line where ``key`` is set in ``table`` (None: the top level), or the line of the
    ``[table]`` header itself when ``key`` is None; None when it cannot be found (or read)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    current: str | None = None
    setting = re.compile(rf"^\s*(\"?){re.escape(key)}\1\s*=") if key else None
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1).replace('"', "").replace(" ", "")
            if key is None and current == table:
                return number
            continue
        if setting is not None and current == table and setting.match(line):
            return number
    return None


def located(path: Path, key: str | None, text: str, table: str | None = None) -> str:
    """``FILE, line N: text`` (``FILE: text`` when the line cannot be found)."""
    line = toml_line(path, key, table)
    return f"{path}, line {line}: {text}" if line else f"{path}: {text}"
