"""Tool selection: which channel tools a deployment offers, decided once at start-up.

The catalog (``channel.tools``) narrowed by the agent file's ``tools`` list and
filtered by the adapter's features. The host calls :func:`select_tools` when it
starts; every session of the deployment offers from the resulting
:class:`ToolSelection` (deferred tools only after ``tool_search`` enabled them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .skills import SkillLibrary
from .tools import CATALOG, SKILLS, TOOL_SEARCH, ToolSpec


@dataclass(slots=True)
class ToolSelection:
    """The tools a deployment offers, after the agent file narrowed the catalog and the
    adapter's features filtered it (see :func:`select_tools`)."""

    channel_tools: tuple[ToolSpec, ...]
    skills: SkillLibrary = field(default_factory=lambda: SkillLibrary([]))

    @property
    def deferred(self) -> tuple[ToolSpec, ...]:
        return tuple(s for s in self.channel_tools if s.starts == "deferred")

    def names(self) -> list[str]:
        names = [s.name for s in self.channel_tools]
        if self.deferred:
            names.append(TOOL_SEARCH.name)
        if self.skills:
            names.append(SKILLS.name)
        return names


def select_tools(
    features: frozenset[str], requested: Sequence[str] | None, skills: SkillLibrary
) -> ToolSelection:
    """The catalog narrowed to ``requested`` (None: every tool the adapter supports).

    Raises ``ValueError`` naming the tool when ``requested`` holds an unknown tool or one
    the adapter does not support, so a misconfigured deployment fails at start-up.
    """
    channel = [s for s in CATALOG.values() if s.name not in (TOOL_SEARCH.name, SKILLS.name)]
    if requested is None:
        chosen = [s for s in channel if s.feature is None or s.feature in features]
        return ToolSelection(tuple(chosen), skills)
    chosen = []
    for name in requested:
        spec = CATALOG.get(name)
        if spec is None:
            raise ValueError(f"agent file selects unknown tool {name!r}; known tools: {', '.join(CATALOG)}")
        if spec in (TOOL_SEARCH, SKILLS) or spec in chosen:
            continue  # offered automatically when there is something to search or read; or a repeat
        if spec.feature is not None and spec.feature not in features:
            raise ValueError(
                f"agent file selects tool {name!r}, but this install does not support it "
                f"(feature {spec.feature!r} is missing; see `python -m app check`)"
            )
        chosen.append(spec)
    if not any(s.name == "channel_reply" for s in chosen):
        chosen.insert(0, CATALOG["channel_reply"])  # the only way an answer reaches a person
    return ToolSelection(tuple(chosen), skills)
