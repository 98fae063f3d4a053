"""Scoring deferred tools against a free-text query, for ``tool_search``.

Exact name beats name-contains beats term matches in the label, description and
parameter names/descriptions. Scoring is deterministic and explains nothing it
does not know: a tool with no match scores 0 and is never enabled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .tools import ToolSpec

_WORD = re.compile(r"[a-z0-9]+")
# Words that match everything and so say nothing about which tool is wanted.
_STOP = frozenset(
    {"a", "an", "the", "to", "of", "in", "on", "my", "i", "and", "or", "for", "it", "this", "channel"}
)


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _stem(word: str) -> str:
    # Crude suffix folding so "editing"/"edits"/"edited" meet "edit"; good enough for eight tools.
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def score(spec: ToolSpec, query: str) -> float:
    q = query.strip().lower()
    if not q:
        return 0.0
    name = spec.name.lower()
    if q == name or q == name.removeprefix("channel_"):
        return 100.0
    total = 0.0
    if q in name:
        total += 50.0
    props = spec.args.model_fields
    fields_text = " ".join(f"{n} {f.description or ''}" for n, f in props.items())
    name_terms = {_stem(t) for t in _terms(name.replace("_", " "))}
    label_terms = {_stem(t) for t in _terms(spec.label)}
    desc_terms = {_stem(t) for t in _terms(spec.description)}
    param_terms = {_stem(t) for t in _terms(fields_text)}
    for term in {_stem(t) for t in _terms(q)}:
        if term in name_terms:
            total += 10.0
        if term in label_terms:
            total += 6.0
        if term in desc_terms:
            total += 3.0
        if term in param_terms:
            total += 1.0
    return total


def rank(specs: Iterable[ToolSpec], query: str, limit: int) -> list[ToolSpec]:
    """The best ``limit`` tools with a positive score, best first (ties by name)."""
    scored = [(score(s, query), s.name, s) for s in specs]
    hits = sorted((t for t in scored if t[0] > 0), key=lambda t: (-t[0], t[1]))
    return [s for _, _, s in hits[:limit]]
