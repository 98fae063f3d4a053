"""A gated call's arguments as a card shows them (``channel.cards``): every key, every value whole.

The model controls the arguments, their order and their length, so the card never cuts them, as a
whole or value by value (a cut could hide ``"; DROP TABLE users;"`` behind "… more characters").
Every leaf of the arguments is one :class:`Field`, shown as the line ``path: value``, where the path
names each key down to the leaf (``params.to``, ``recipients[1]``) and the value is JSON (a newline
in it cannot start a line of its own). Characters a reader cannot see — zero-width characters,
bidirectional overrides and isolates, other format and control characters, unusual spaces — are
shown by their code point (``<U+202E>``, :func:`visible`), so what the card shows is what runs.

Fields are shown in groups, each a code block that fits one section of the card (Slack: 3,000
characters). A value longer than one section is shown whole in consecutive sections, each piece
labelled ``path (part 2 of 3)``. A card holds at most :data:`MAX_SECTIONS` sections (a Slack message
holds 50 blocks; the card needs a few of its own), about 115,000 characters of arguments; arguments
that do not fit cannot be shown whole, and the gate denies the call instead (invariant "Approvals
show everything", docs/architecture.md).
"""

from __future__ import annotations

import json
import re
import unicodedata
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
    "visible",
]

#: Characters of one group shown as a code block (a Slack section allows 3,000), escaping and the
#: fence included.
MAX_SECTION_CHARS = 2900
#: Groups of fields on one card (a Slack message holds 50 blocks; the card needs a few more).
MAX_SECTIONS = 40
#: Fewest characters of a long value a section takes as one piece (else the piece starts the next).
_MIN_PIECE = 200
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,79}")
#: Unicode categories nobody sees as what they are: format (zero-width, BiDi, tags), controls,
#: line/paragraph separators, surrogates, private use, unassigned.
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp", "Cs", "Co", "Cn"})
#: Invisible or blank-looking characters of other categories: the combining grapheme joiner,
#: Khmer and Mongolian invisible marks, Hangul fillers, the braille blank, variation selectors.
_HIDDEN_EXTRA = frozenset(
    {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800, 0x3164, 0xFFA0}
    | set(range(0xFE00, 0xFE10))
    | set(range(0xE0100, 0xE01F0))
)


class ArgumentsUnshowable(ValueError):
    """The arguments are more than one approval card can show whole."""


@dataclass(frozen=True, slots=True)
class Field:
    """One leaf of the arguments (or one piece of a long one): its path (``params.to``; ``""`` for a
    line of its own) and its value as shown (JSON, invisible characters made visible, never cut)."""

    label: str
    value: str

    @property
    def line(self) -> str:
        return f"{self.label}: {self.value}" if self.label else self.value


def escape(text: str) -> str:
    """Markup escaping (Slack's mrkdwn, HTML): ``&``, ``<`` and ``>`` can no longer form mentions or links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _hidden(char: str) -> bool:
    code = ord(char)
    if code in _HIDDEN_EXTRA:
        return True
    category = unicodedata.category(char)
    # Spaces other than the plain one (no-break, en, ideographic…) look like it but are not it.
    return category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " ")


def visible(text: str, keep: str = "") -> str:
    """``text`` with every character a reader cannot see (or tell from a space) written as its code
    point, ``<U+202E>``, except those in ``keep`` (Markdown keeps its newlines)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(f"<U+{ord(c):04X}>" if _hidden(c) and c not in keep else c for c in text)


def argument_fields(args: str) -> tuple[tuple[Field, ...], ...]:
    """Every leaf of ``args`` (a JSON object, usually) as fields, whole, in groups that fit the card.

    Raises :class:`ArgumentsUnshowable` when they need more sections than a card holds."""
    try:
        value: Any = json.loads(args) if args.strip() else {}
    except ValueError:
        value = args  # not JSON: shown as one string
    if value == {}:
        return ((Field("", "(no arguments)"),),)
    leaves = list(_leaves("", value))
    shown = [
        (visible(path) or "(value)", visible(json.dumps(leaf, ensure_ascii=False))) for path, leaf in leaves
    ]
    groups = _Packer().pack(shown)
    if groups is None:
        size = sum(len(label) + len(text) + 2 for label, text in shown)
        raise ArgumentsUnshowable(
            f"its arguments ({len(leaves)} values, {size} characters as shown) are more than one "
            f"approval card can show whole ({MAX_SECTIONS} sections of {MAX_SECTION_CHARS} characters)"
        )
    return groups


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


class _Packer:
    """Fields packed into as few sections as fit: a value too long for the room left in the current
    section is split into pieces labelled ``path (part i of n)`` (split, never shortened)."""

    def __init__(self) -> None:
        self.groups: list[list[Field]] = [[]]

    def _fits(self, field: Field) -> bool:
        return len(code_block([*self.groups[-1], field])) <= MAX_SECTION_CHARS

    def _new_group(self) -> bool:
        self.groups.append([])
        return len(self.groups) <= MAX_SECTIONS

    def pack(self, leaves: Sequence[tuple[str, str]]) -> tuple[tuple[Field, ...], ...] | None:
        for label, value in leaves:
            whole = Field(label, value)
            if self._fits(whole):
                self.groups[-1].append(whole)
            elif len(code_block([whole])) <= MAX_SECTION_CHARS:
                if not self._new_group():
                    return None
                self.groups[-1].append(whole)
            elif not self._split(label, value):
                return None
        return tuple(tuple(g) for g in self.groups if g)

    def _split(self, label: str, value: str) -> bool:
        # Room is measured with the longest label a piece can have; the real ones are no longer.
        template = Field(f"{label} (part 999 of 999)", "")
        placed: list[tuple[int, int, str]] = []
        rest = value
        while rest:
            room = MAX_SECTION_CHARS - len(code_block([*self.groups[-1], template]))
            if room < _MIN_PIECE:
                if not self.groups[-1] or not self._new_group():
                    return False  # a label too long for any section, or no sections left
                continue
            cut = _fitting(rest, room)
            placed.append((len(self.groups) - 1, len(self.groups[-1]), rest[:cut]))
            self.groups[-1].append(Field(template.label, rest[:cut]))
            rest = rest[cut:]
        for number, (group, index, chunk) in enumerate(placed, 1):
            self.groups[group][index] = Field(f"{label} (part {number} of {len(placed)})", chunk)
        return len(placed) <= 999


def _fitting(text: str, room: int) -> int:
    """How many characters of ``text`` fit ``room`` once escaped, not splitting a ``<U+…>`` marker."""
    used = 0
    cut = 0
    while cut < len(text):
        # Escaping grows &, < and >; a backtick may become part of a broken fence.
        used += len(escape(text[cut])) + (2 if text[cut] == "`" else 0)
        if used > room:
            break
        cut += 1
    else:
        return len(text)
    marker = text.rfind("<U+", max(0, cut - 10), cut)
    if marker > 0 and text.find(">", marker) >= cut:
        cut = marker  # the marker goes whole into the next piece
    return max(cut, 1)


def code_block(fields: Sequence[Field]) -> str:
    """A group of fields as one code block, a line each, markup escaped: what the budget counts,
    and what Slack shows."""
    # A fence inside the arguments would end the code block early: a zero-width space breaks it.
    text = "\n".join(field.line for field in fields)
    return "```" + escape(text).replace("```", "`\u200b``") + "```"
