"""Scoring deferred tools against a free-text query, for ``tool_search``.

Channel tools and the host's tools (an MCP server's ``tickets_search_tickets``)
are ranked together: anything :class:`Searchable` can be scored. Matches come
in three tiers, and a higher tier always wins: the query *is* a tool's name
(``channel_edit`` or ``edit``), the query is *part of* a tool's
name, and term matches in the name, label, description and parameter
names/descriptions (weighted in that order). Scoring is deterministic and
explains nothing it does not know: a tool with no match scores 0 and is never
enabled, and a tool whose only match is much weaker than the best one (say, the
word "message" in its description when another tool matched "edit" too) is not
enabled either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple, Protocol, TypeVar

_WORD = re.compile(r"[a-z0-9]+")
# Words that match everything and so say nothing about which tool is wanted.
_STOP = frozenset(
    {"a", "an", "the", "to", "of", "in", "on", "my", "i", "and", "or", "for", "it", "this", "channel"}
)
# Points per query term found in each part of a tool's text.
_NAME, _LABEL, _DESCRIPTION, _PARAMETER = 10.0, 6.0, 3.0, 1.0
# A terms-only hit with less than this share of the best hit's points is left out.
_RELATIVE_CUTOFF = 1 / 3


class Searchable(Protocol):
    """What tool_search reads of a tool (``ToolSpec`` and the host's tools have it)."""

    @property
    def name(self) -> str: ...

    #: The name without its family prefix (``edit`` for ``channel_edit``); asking for it is an exact match.
    @property
    def short_name(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def description(self) -> str: ...

    def parameter_text(self) -> str:
        """Parameter names and descriptions, space-separated."""
        ...


T = TypeVar("T", bound=Searchable)


class Score(NamedTuple):
    """How well a tool matches a query; tuples compare tier first, then points."""

    #: 2: the query is the tool's name; 1: the query is part of its name; 0: terms only.
    tier: int
    #: Term points (name 10, label 6, description 3, parameter 1 per query term).
    points: float

    def __bool__(self) -> bool:
        return self.tier > 0 or self.points > 0


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _stem(word: str) -> str:
    # Crude suffix folding so "editing"/"edits"/"edited" meet "edit"; good enough for eight tools.
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _stems(text: str) -> set[str]:
    return {_stem(t) for t in _terms(text)}


def score(spec: Searchable, query: str) -> Score:
    q = query.strip().lower()
    if not q:
        return Score(0, 0.0)
    name = spec.name.lower()
    tier = 2 if q in (name, spec.short_name.lower()) else 1 if q in name else 0
    parts = (
        (_stems(name.replace("_", " ")), _NAME),
        (_stems(spec.label), _LABEL),
        (_stems(spec.description), _DESCRIPTION),
        (_stems(spec.parameter_text()), _PARAMETER),
    )
    points = sum(weight for term in _stems(q) for stems, weight in parts if term in stems)
    return Score(tier, points)


def rank(specs: Iterable[T], query: str, limit: int) -> list[T]:
    """The best ``limit`` matching tools, best first (ties by name); see the module docstring."""
    scored = sorted(
        ((score(s, query), s) for s in specs), key=lambda t: (-t[0].tier, -t[0].points, t[1].name)
    )
    hits = [(sc, s) for sc, s in scored if sc]
    if not hits:
        return []
    best = hits[0][0]
    kept = [s for sc, s in hits if sc.tier > 0 or sc.points >= best.points * _RELATIVE_CUTOFF]
    return kept[:limit]
