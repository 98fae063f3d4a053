"""A gated call's arguments as a card shows them (``channel.cards``): every key, long values shortened.

The model controls the arguments, their order and their length, so the card never cuts the
arguments as a whole (which could push ``"to": "attacker@…"`` past the cut). Instead every leaf
of the arguments is one :class:`Field`, shown as the line ``path: value``, where the path names
each key down to the leaf (``params.to``, ``recipients[1]``) and the value is JSON (a newline in it
cannot start a line of its own). Fields are shown in groups, each a code block; values are
shortened, step by step, until every group fits the card's budget (Slack's block limits, the
tightest a provider has); paths are never shortened. Arguments that do not fit even then
(thousands of keys, a key of thousands of characters) cannot be shown, and the gate denies the call
instead (invariant "Approvals show everything", docs/architecture.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_SECTIONS",
    "MAX_SECTION_CHARS",
    "ArgumentsUnshowable",
    "Field",
    "argument_fields",
    "code_block",
    "escape",
]

#: Characters of one group shown as a code block (a Slack section allows 3,000), escaping and the
#: fence included.
MAX_SECTION_CHARS = 2900
#: Groups of fields on one card (a Slack message holds 50 blocks; the card needs a few more).
MAX_SECTIONS = 12
#: Longest a value is shown, then shorter and shorter until every key fits.
_VALUE_LIMITS = (1000, 400, 160, 60, 24)
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,79}")


class ArgumentsUnshowable(ValueError):
    """The arguments have more, or longer, keys than one approval card can show."""


@dataclass(frozen=True, slots=True)
class Field:
    """One leaf of the arguments: its path (``params.to``; ``""`` for a line of its own) and its
    value as shown (JSON, shortened when long)."""

    label: str
    value: str

    @property
    def line(self) -> str:
        return f"{self.label}: {self.value}" if self.label else self.value


def escape(text: str) -> str:
    """Markup escaping (Slack's mrkdwn, HTML): ``&``, ``<`` and ``>`` can no longer form mentions or links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def argument_fields(args: str) -> tuple[tuple[Field, ...], ...]:
    """Every leaf of ``args`` (a JSON object, usually) as fields, in groups that fit the card.

    Raises :class:`ArgumentsUnshowable` when even the shortest values leave a key unshown."""
    try:
        value: Any = json.loads(args) if args.strip() else {}
    except ValueError:
        value = args  # not JSON: shown as one (shortened) string
    if value == {}:
        return ((Field("", "(no arguments)"),),)
    leaves = list(_leaves("", value))
    for limit in _VALUE_LIMITS:
        groups = _pack([Field(path or "(value)", _shown(leaf, limit)) for path, leaf in leaves])
        if groups is not None:
            return groups
    raise ArgumentsUnshowable(
        f"its arguments have {len(leaves)} values under keys totalling "
        f"{sum(len(p) for p, _ in leaves)} characters: more than one approval card can show with "
        "every key visible"
    )


def _leaves(path: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            name = key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)
            yield from _leaves(f"{path}.{name}" if path else name, inner)
    elif isinstance(value, list) and value:
        for index, inner in enumerate(value):
            yield from _leaves(f"{path}[{index}]", inner)
    else:
        yield path, value


def _shown(value: Any, limit: int) -> str:
    if isinstance(value, str) and len(value) > limit:
        cut = len(value) - limit
        return f"{json.dumps(value[:limit], ensure_ascii=False)} … ({cut} more characters)"
    return json.dumps(value, ensure_ascii=False)


def _pack(fields: list[Field]) -> tuple[tuple[Field, ...], ...] | None:
    """Fields packed into as few groups as fit, or None when they need too many."""
    groups: list[tuple[Field, ...]] = []
    current: list[Field] = []
    for field in fields:
        if len(code_block([field])) > MAX_SECTION_CHARS:
            return None
        if current and len(code_block([*current, field])) > MAX_SECTION_CHARS:
            groups.append(tuple(current))
            current = []
        current.append(field)
    if current:
        groups.append(tuple(current))
    return tuple(groups) if len(groups) <= MAX_SECTIONS else None


def code_block(fields: Sequence[Field]) -> str:
    """A group of fields as one code block, a line each, markup escaped: what the budget counts,
    and what Slack shows."""
    # A fence inside the arguments would end the code block early: a zero-width space breaks it.
    text = "\n".join(field.line for field in fields)
    return "```" + escape(text).replace("```", "`\u200b``") + "```"
