"""Skills: Markdown how-to documents the agent can list and read with the ``skills`` tool.

Each ``*.md`` file in the skills folder is one skill, named by its file stem.
Its summary is the ``description:`` of a leading front-matter block, or else its
first heading, or else its first non-empty line.
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


def _summary(text: str) -> str:
    front = _FRONT.match(text)
    if front:
        for line in front.group(1).splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "description" and value.strip():
                return value.strip().strip("\"'")
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
        skills = []
        for path in sorted(folder.glob("*.md")):
            text = path.read_text(encoding="utf-8")
            skills.append(Skill(path.stem, _summary(text), text))
        return cls(skills)

    def __bool__(self) -> bool:
        return bool(self._skills)

    def names(self) -> list[str]:
        return list(self._skills)

    def index(self) -> dict[str, object]:
        return {"skills": [{"name": s.name, "summary": s.summary} for s in self._skills.values()]}

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)
