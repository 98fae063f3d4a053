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
from channel.cards import Card, Choice, Code, Emphasis, Icon, Input, Line, Mention, Span, Strong, Text, Time
from channel.markdown import strip_mass_mentions

from .link import split_ref

__all__ = [
    "INPUT_ACTION",
    "ArgumentsUnshowable",
    "arg_sections",
    "blocks",
    "click_key",
    "clicked_ref",
    "input_block_id",
    "input_values",
]

Block = dict[str, Any]
#: Characters of a button's label Slack shows.
_MAX_LABEL = 75
#: Characters of an input's label and hint Slack accepts.
_MAX_INPUT_LABEL = 2000
_MAX_HINT = 2000
#: The action id of every input element, and the prefix of an input's block id.
INPUT_ACTION = "threadbound_input"
_INPUT_PREFIX = "in:"


def blocks(card: Card) -> tuple[str, list[Block]]:
    """``(fallback text, blocks)`` of ``card``."""
    drawn: list[Block] = [_section(_mrkdwn(card.title))]
    drawn += [{"type": "markdown", "text": strip_mass_mentions(text)} for text in card.body]
    drawn += [_section(code_block(group)) for group in card.fields]
    if card.notice:
        drawn.append(_section(_mrkdwn(card.notice)))
    if card.note:
        drawn.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(card.note)}]})
    drawn += [_input(field) for field in card.inputs]
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


def _input(field: Input) -> Block:
    """An ``input`` block; its value comes back in the click's ``state`` under block ``input_block_id``."""
    element: Block
    if field.kind in ("number", "integer"):
        element = {"type": "number_input", "is_decimal_allowed": field.kind == "number"}
    elif field.kind in ("choice", "choices", "boolean"):
        values = field.options if field.kind != "boolean" else ("true", "false")
        labels = (field.labels or field.options) if field.kind != "boolean" else ("Yes", "No")
        options = [_option(label, value) for label, value in zip(labels, values, strict=True)]
        multiple = field.kind == "choices"
        element = {"type": "multi_static_select" if multiple else "static_select", "options": options}
        initial = field.initial.split("\n") if field.initial else []
        chosen = [o for o in options if o["value"] in initial]
        if chosen:
            element["initial_options" if multiple else "initial_option"] = chosen if multiple else chosen[0]
    else:
        element = {"type": "plain_text_input"}
    element["action_id"] = INPUT_ACTION
    if field.initial and element["type"] in ("plain_text_input", "number_input"):
        element["initial_value"] = field.initial
    block: Block = {
        "type": "input",
        "block_id": input_block_id(field.name),
        "label": {"type": "plain_text", "text": field.label[:_MAX_INPUT_LABEL] or field.name},
        "element": element,
        "optional": not field.required,
    }
    if field.hint:
        block["hint"] = {"type": "plain_text", "text": field.hint[:_MAX_HINT]}
    return block


def _option(label: str, value: str) -> Block:
    return {"text": {"type": "plain_text", "text": label[:_MAX_LABEL] or value}, "value": value[:150]}


def input_block_id(name: str) -> str:
    """The block id of input ``name``: what :func:`input_values` reads back."""
    return _INPUT_PREFIX + name


def input_values(state: Any) -> dict[str, str]:
    """The inputs' values of a click's ``state`` (``{"values": {block_id: {action_id: …}}}``), by
    input name; an input left empty is absent."""
    values = state.get("values") if isinstance(state, dict) else None
    found: dict[str, str] = {}
    for block_id, elements in (values or {}).items():
        if not str(block_id).startswith(_INPUT_PREFIX) or not isinstance(elements, dict):
            continue
        element = elements.get(INPUT_ACTION)
        if not isinstance(element, dict):
            continue
        value = element.get("value")
        if value is None and isinstance(element.get("selected_option"), dict):
            value = element["selected_option"].get("value")
        if value is None and isinstance(element.get("selected_options"), list):
            value = "\n".join(str(o.get("value")) for o in element["selected_options"] if isinstance(o, dict))
        if value is not None and str(value) != "":
            found[str(block_id)[len(_INPUT_PREFIX) :]] = str(value)
    return found


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
