"""Skills: Markdown how-to documents the agent can list and read with the ``skills`` tool.

Two layouts, in one folder, side by side:

- a flat ``NAME.md`` file is one skill named by its file stem;
- the Agent Skills layout: a folder ``NAME/`` holding ``SKILL.md``, whose YAML front matter gives
  ``name`` and ``description`` (the folder's name when ``name`` is missing). Other files in the
  folder are not offered to the model: only ``SKILL.md`` is read.

A skill's summary is the ``description`` of a leading front-matter block (one line, or a ``>``/``|``
block), or else its first heading, or else its first non-empty line. When a flat file and a folder
give the same name, the folder's ``SKILL.md`` is the skill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    summary: str
    body: str


def front_matter(text: str) -> dict[str, str]:
    """The top-level string keys of a leading ``---`` block: ``key: value`` lines, and ``key: >`` or
    ``key: |`` followed by indented lines (folded into one line). Enough of YAML for skill files,
    without a YAML library."""
    front = _FRONT.match(text)
    if not front:
        return {}
    values: dict[str, str] = {}
    block: str | None = None
    for line in front.group(1).splitlines():
        if block is not None and (line.startswith((" ", "\t")) or not line.strip()):
            values[block] = f"{values[block]} {line.strip()}".strip()
            continue
        block = None
        key, colon, value = line.partition(":")
        if not colon or key != key.strip() or not key:
            continue
        value = value.strip()
        if value in (">", "|", ">-", "|-", ">+", "|+"):
            block, values[key] = key, ""
        else:
            values[key] = value.strip("\"'")
    return values


def _summary(text: str) -> str:
    description = front_matter(text).get("description", "")
    if description:
        return description
    front = _FRONT.match(text)
    if front:
        text = text[front.end() :]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return lines[0][:200] if lines else "(empty)"


class SkillLibrary:
    """Skills loaded once at start-up; reading them needs no I/O afterwards."""

    def __init__(self, skills: list[Skill]) -> None:
        self._skills = {s.name: s for s in sorted(skills, key=lambda s: s.name)}

    @classmethod
    def load(cls, folder: Path | None) -> SkillLibrary:
        # Start-up only (before the event loop serves requests), so plain file reads are fine here.
        if folder is None or not folder.is_dir():
            return cls([])
        skills = {}
        for path in sorted(folder.glob("*.md")):
            text = path.read_text(encoding="utf-8")
            skills[path.stem] = Skill(path.stem, _summary(text), text)
        for path in sorted(folder.glob("*/SKILL.md")):
            text = path.read_text(encoding="utf-8")
            name = front_matter(text).get("name") or path.parent.name
            skills[name] = Skill(name, _summary(text), text)
        return cls(list(skills.values()))

    def __bool__(self) -> bool:
        return bool(self._skills)

    def names(self) -> list[str]:
        return list(self._skills)

    def index(self) -> dict[str, object]:
        return {"skills": [{"name": s.name, "summary": s.summary} for s in self._skills.values()]}

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)
