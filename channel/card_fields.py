"""A gated call's arguments as an approval card shows them: every key, long values shortened.

The model controls the arguments, their order and their length, so the card never cuts the
arguments as a whole (which could push ``"to": "attacker@…"`` past the cut). Instead every leaf
of the arguments is one line, ``path: value``, where the path names each key down to the leaf
(``params.to``, ``recipients[1]``) and the value is JSON (a newline in it cannot start a line of
its own). Values are shortened, step by step, until every line fits Slack's block limits; paths
are never shortened. Arguments that do not fit even then (thousands of keys, a key of thousands
of characters) cannot be shown, and the gate denies the call instead (invariant 11).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_SECTIONS", "MAX_SECTION_CHARS", "ArgumentsUnshowable", "arg_sections", "escape"]

#: Characters of one section's text (Slack allows 3,000), escaping and the code fence included.
MAX_SECTION_CHARS = 2900
#: Sections of arguments on one card (a message holds 50 blocks; the card needs a few more).
MAX_SECTIONS = 12
#: Longest a value is shown, then shorter and shorter until every key fits.
_VALUE_LIMITS = (1000, 400, 160, 60, 24)
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,79}")


class ArgumentsUnshowable(ValueError):
    """The arguments have more, or longer, keys than one approval card can show."""


def escape(text: str) -> str:
    """Slack mrkdwn escaping: ``&``, ``<`` and ``>`` can no longer form mentions or links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def arg_sections(args: str) -> list[str]:
    """The section texts (code blocks) showing every leaf of ``args`` (a JSON object, usually).

    Raises :class:`ArgumentsUnshowable` when even the shortest values leave a key unshown."""
    try:
        value: Any = json.loads(args) if args.strip() else {}
    except ValueError:
        value = args  # not JSON: shown as one (shortened) string
    if value == {}:
        return [_fence("(no arguments)")]
    leaves = list(_leaves("", value))
    for limit in _VALUE_LIMITS:
        sections = _pack([f"{path or '(value)'}: {_shown(leaf, limit)}" for path, leaf in leaves])
        if sections is not None:
            return sections
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


def _pack(lines: list[str]) -> list[str] | None:
    """Lines packed into as few sections as fit, or None when they need too many."""
    sections: list[str] = []
    current: list[str] = []
    for line in lines:
        if len(_fence(line)) > MAX_SECTION_CHARS:
            return None
        if current and len(_fence("\n".join([*current, line]))) > MAX_SECTION_CHARS:
            sections.append(_fence("\n".join(current)))
            current = []
        current.append(line)
    if current:
        sections.append(_fence("\n".join(current)))
    return sections if len(sections) <= MAX_SECTIONS else None


def _fence(text: str) -> str:
    # A fence inside the arguments would end the code block early.
    return "```" + escape(text).replace("```", "`\u200b``") + "```"
