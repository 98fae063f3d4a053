"""Reading the prompt a model was sent: its message rows (one JSON object per line).

``rows`` parses them back; ``readable`` lays them out as a person would read them
("Alice (msg_…): text", files indented below) so tests can look for what a message
said; ``handles`` lists the message handles in order. The prompt itself stays JSON:
tests of the forged-line attack look at the raw text.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: A message handle anywhere in a prompt (the ``message`` field of a row, or a note).
HANDLE = re.compile(r"msg_[A-Za-z0-9_-]{8,40}")


def rows(prompt: str) -> list[dict[str, Any]]:
    """Every message row of ``prompt``, in order (notes and other lines skipped)."""
    out = []
    for line in prompt.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                out.append(row)
    return out


def handles(prompt: str) -> list[str]:
    """The message handles of ``prompt``'s rows, in order."""
    return [str(r["message"]) for r in rows(prompt) if "message" in r]


def readable(prompt: str) -> str:
    """``prompt`` laid out for reading: each row as ``author (handle): text`` with its files
    below; other lines as they are."""
    lines = []
    for line in prompt.splitlines():
        parsed = rows(line)
        if not parsed:
            lines.append(line)
            continue
        row = parsed[0]
        if "unavailable" in row and "message" not in row:
            lines.append(f"({row['unavailable']})")
            continue
        if isinstance(about := row.get("asked_about"), dict):  # a message shortcut
            lines.append(f"{row.get('author')} asks about {about.get('author')} ({about.get('message')}): ")
            lines[-1] += str(about.get("text", ""))
            continue
        text = str(row.get("text", ""))
        sep = "\n" if "\n" in text or text.startswith((">", "-", "```")) else " "
        lines.append(f"{row.get('author')} ({row.get('message')}):{sep}{text}")
        for f in row.get("files", []):
            if "file" not in f:
                lines.append(f"  attached, but you cannot open it ({f['unavailable']}): {f['name']}")
            else:
                lines.append(f"  attached {f['file']}: {f['name']} ({f['media_type']}, {f['size']} bytes)")
    return "\n".join(lines)
