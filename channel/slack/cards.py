"""Cards (``channel.cards``) as Slack draws them: Block Kit sections, a context line and buttons.

A card's title and notice are ``section`` blocks, the model's Markdown ``markdown`` blocks (mass
mentions defused), each group of fields one ``section`` holding a code block
(``channel.card_fields.code_block``), the note a ``context`` block, the choices one ``actions``
block named by the card's group. Text in a line is escaped so nothing in it can mention or link;
a person is ``<@U…>`` and a time Slack's ``<!date^…>``, shown in each reader's time zone.

A click reports the clicked message by its ts, which is also what the store keeps of a posted card
(:func:`click_key`); :func:`clicked_ref` turns it back into the message's ref.
"""

from __future__ import annotations

from typing import Any

from channel.card_fields import ArgumentsUnshowable, argument_fields, code_block, escape
from channel.cards import Card, Choice, Code, Emphasis, Icon, Line, Mention, Span, Strong, Text, Time
from channel.markdown import strip_mass_mentions

from .link import split_ref

__all__ = ["ArgumentsUnshowable", "arg_sections", "blocks", "click_key", "clicked_ref"]

Block = dict[str, Any]
#: Characters of a button's label Slack shows.
_MAX_LABEL = 75


def blocks(card: Card) -> tuple[str, list[Block]]:
    """``(fallback text, blocks)`` of ``card``."""
    drawn: list[Block] = [_section(_mrkdwn(card.title))]
    drawn += [{"type": "markdown", "text": strip_mass_mentions(text)} for text in card.body]
    drawn += [_section(code_block(group)) for group in card.fields]
    if card.notice:
        drawn.append(_section(_mrkdwn(card.notice)))
    if card.note:
        drawn.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(card.note)}]})
    if card.choices:
        drawn.append(
            {"type": "actions", "block_id": card.group, "elements": [_button(c) for c in card.choices]}
        )
    return card.fallback, drawn


def arg_sections(args: str) -> list[str]:
    """The section texts showing every leaf of ``args`` (JSON), as an approval card draws them.

    Raises :class:`ArgumentsUnshowable` when even the shortest values leave a key unshown."""
    return [code_block(group) for group in argument_fields(args)]


def click_key(ref: str) -> str:
    """The key a click on message ``ref`` reports: its ts."""
    return split_ref(ref)[1]


def clicked_ref(channel: str, key: str) -> str:
    """The ref of the message a click reports as ``key`` (its ts) in ``channel``."""
    return f"{channel}:{key}"


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _button(choice: Choice) -> Block:
    button: Block = {
        "type": "button",
        "action_id": choice.action,
        "text": {"type": "plain_text", "text": choice.label[:_MAX_LABEL]},
        "value": choice.value,
    }
    if choice.style:
        button["style"] = choice.style
    return button


def _mrkdwn(line: Line) -> str:
    return "".join(_span(span) for span in line)


def _span(span: Span) -> str:
    match span:
        case Text(text):
            return escape(text)
        case Strong(text):
            return f"*{escape(text)}*"
        case Emphasis(text):
            return f"_{escape(text)}_"
        case Code(text):
            return f"`{escape(text)}`"
        case Mention(user):
            return f"<@{escape(user)}>"
        case Time(at, fallback):
            return f"<!date^{int(at)}^{{date_short_pretty}} at {{time}}|{escape(fallback)}>"
        case Icon(name):
            return f":{name}:"
