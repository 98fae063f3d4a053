"""Cards: a message with choices people click (an approval, an ask), as plain data any adapter draws.

A :class:`Card` says what the card shows — a title line, the model's Markdown, the fields of a
call (every key, in groups shown together), a line of small print, its choices — and whether it is
still open. It holds no provider markup: its lines are :data:`Span` runs (plain text, strong,
emphasis, code, a person, a time, an icon) that each adapter writes in its own syntax, escaping
text as its markup needs (Slack: ``channel.slack.cards``; the fake keeps the card as it is). A
:class:`Choice`'s ``action`` and ``value`` come back with the click (``app.clicks.Action``), so the
code that built the card also routes its clicks.

Feedback buttons under an answer are not cards (the adapter draws them from the ``feedback`` key
of a post); only their action id lives here, :data:`FEEDBACK_ACTION`, for the click handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .card_fields import Field

__all__ = [
    "FEEDBACK_ACTION",
    "Answerers",
    "Card",
    "Choice",
    "Code",
    "Emphasis",
    "Field",
    "Icon",
    "Input",
    "Line",
    "Mention",
    "Span",
    "Strong",
    "Text",
    "Time",
]

#: Action id of the feedback buttons under an answer; a click's value is ``kind:key``
#: (``positive``/``negative``, and the ``feedback`` key of the post).
FEEDBACK_ACTION = "threadbound_feedback"


@dataclass(frozen=True, slots=True)
class Text:
    """Plain text, shown as written (an adapter escapes its markup characters)."""

    text: str


@dataclass(frozen=True, slots=True)
class Strong:
    text: str


@dataclass(frozen=True, slots=True)
class Emphasis:
    text: str


@dataclass(frozen=True, slots=True)
class Code:
    """Inline code: a tool's name."""

    text: str


@dataclass(frozen=True, slots=True)
class Mention:
    """A person, by the provider's user id (shown by name, without notifying them)."""

    user: str


@dataclass(frozen=True, slots=True)
class Time:
    """A moment, shown in each reader's time zone where the provider can; ``fallback`` otherwise."""

    at: float
    fallback: str


@dataclass(frozen=True, slots=True)
class Icon:
    """A small picture before a line, by its common emoji name (``raised_hand``, ``hourglass``)."""

    name: str


Span = Text | Strong | Emphasis | Code | Mention | Time | Icon
#: One line of a card: spans in order, joined with nothing between them.
Line = tuple[Span, ...]

Style = Literal["", "primary", "danger"]
#: Who may answer a card: ``anyone`` in the conversation; the requester or an approver; only approvers.
Answerers = Literal["anyone", "requester", "approvers"]


@dataclass(frozen=True, slots=True)
class Choice:
    """A button. A click reports ``action`` and ``value``; ``style`` marks the safe (``primary``)
    and the destructive (``danger``) choice."""

    action: str
    label: str
    value: str
    style: Style = ""


#: What an input takes: one line of text, a number (``integer``: a whole one), yes/no, one of
#: ``options``, or any of them (``choices``: a click reports them one per line).
InputKind = Literal["text", "number", "integer", "boolean", "choice", "choices"]


@dataclass(frozen=True, slots=True)
class Input:
    """A field people fill in on the card; a click on one of its choices reports every input's
    value by ``name`` (``app.clicks.Action.values``)."""

    name: str
    label: str
    kind: InputKind = "text"
    #: For ``choice`` and ``choices``: the values offered, in order, and what people read for each
    #: (``labels``, the values themselves when empty).
    options: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    required: bool = False
    #: A line under the field (its description), plain text.
    hint: str = ""
    #: The value shown to start with, "" for none.
    initial: str = ""


@dataclass(frozen=True, slots=True)
class Card:
    """One card, open (with choices) or decided (who decided what is in ``note``; no choices)."""

    #: Plain text for notifications and clients that show no cards.
    fallback: str
    #: The heading line ("Approval needed to run ``tool`` with:").
    title: Line
    #: Paragraphs of the model's own Markdown (a question, its details), mass mentions not yet defused.
    body: tuple[str, ...] = ()
    #: A call's arguments, every key, in groups shown together (``channel.card_fields``).
    fields: tuple[tuple[Field, ...], ...] = ()
    #: A line in place of fields that cannot be shown.
    notice: Line = ()
    #: Small print under the card: who may answer and until when, or who decided and when.
    note: Line = ()
    #: Fields to fill in, above the buttons; empty once decided.
    inputs: tuple[Input, ...] = ()
    #: The buttons, in order; empty once decided (or for a question answered by a reply).
    choices: tuple[Choice, ...] = ()
    #: Names the choices as one group (the provider may report it with a click).
    group: str = ""
    #: ``open`` while a click can decide it; ``decided`` after.
    state: Literal["open", "decided"] = "open"
    #: Who may answer (:data:`Answerers`); ``requester``: the person whose message led to the card
    #: (``""`` when none: then only the approvers).
    answerers: Answerers = "requester"
    requester: str = ""
    #: Who decided (a user id; ``""`` for an expiry or while open).
    decided_by: str = ""
