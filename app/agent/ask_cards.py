"""The cards of the agent's own asks, as neutral cards (``channel.cards``): a question with one
choice per option (or a note that the next message answers it), an approval request with
Approve/Deny; once decided, who answered what and when, and no choices.

The model's text is the card's Markdown body (the adapter defuses mass mentions, ``@channel``…);
option labels are plain text. A choice's value is ``<ask id>:<option index>`` (approvals: the ask id).
"""

from __future__ import annotations

from dataclasses import replace

from channel.card_fields import visible
from channel.cards import Answerers, Card, Choice, Icon, Line, Mention, Strong, Text, Time
from storage.base import AskRecord

#: One action id per option position (Slack wants them unique within a card).
OPTION_ACTIONS = tuple(f"threadbound_ask_option_{i}" for i in range(5))
ASK_APPROVE = "threadbound_ask_approve"
ASK_DENY = "threadbound_ask_deny"
#: The card's group of choices.
GROUP = "threadbound_ask"


def _heading(ask: AskRecord) -> Line:
    if ask.kind == "question":
        return (Icon("grey_question"), Text(" "), Strong("Question"))
    return (Icon("raised_hand"), Text(" "), Strong("Approval requested"))


def _card(ask: AskRecord, fallback: str, note: Line) -> Card:
    # Approvals show everything: what a reader cannot see (BiDi overrides, zero-width) is shown by code point.
    body = tuple(visible(t, keep="\n\t") for t in ((ask.text, ask.details) if ask.details else (ask.text,)))
    answerers: Answerers = "anyone" if not ask.only_requester else "requester"
    return Card(fallback, _heading(ask), body, note=note, answerers=answerers, requester=ask.requester)


def _who(ask: AskRecord) -> Line:
    if not ask.only_requester:
        return (Text("Anyone here can answer"),)
    if ask.requester:
        return (Text("For "), Mention(ask.requester), Text(" or an approver"))
    return (Text("For an approver"),)


def open_card(ask: AskRecord, ttl: float) -> Card:
    """The card of an ask waiting for its answer."""
    until = Time(ask.created_at + ttl, "in a while")
    choices: tuple[Choice, ...]
    if ask.kind == "approval":
        choices = (
            Choice(ASK_APPROVE, "Approve", ask.ask_id, "primary"),
            Choice(ASK_DENY, "Deny", ask.ask_id, "danger"),
        )
    else:
        choices = tuple(
            Choice(OPTION_ACTIONS[i], label, f"{ask.ask_id}:{i}") for i, label in enumerate(ask.options)
        )
    note: Line = (*_who(ask), Text(" · open until "), until)
    if ask.kind == "question" and not ask.options:
        note = (Text("Reply in this thread to answer · "), *note)
    fallback = "Question" if ask.kind == "question" else "Approval requested"
    card = _card(ask, f"{fallback}: {ask.text[:150]}", note)
    return replace(card, choices=choices, group=GROUP if choices else "")


def decided_card(ask: AskRecord) -> Card:
    """The card of a decided ask: who answered what, and when; no choices."""
    when = Time(ask.decided_at or ask.created_at, "just now")
    by = Mention(ask.decided_by or "")
    if ask.decision == "expired":
        line: Line = (
            Icon("hourglass"),
            Text(" "),
            Strong("Expired"),
            Text(" "),
            when,
            Text(": nobody answered in time."),
        )
    elif ask.decision == "answered":
        answer = Strong((ask.answer or "")[:200])
        line = (Icon("speech_balloon"), Text(" "), by, Text(" answered "), answer, Text(" "), when)
    else:
        label = "Approved" if ask.decision == "approved" else "Denied"
        emoji = "white_check_mark" if ask.decision == "approved" else "no_entry_sign"
        line = (Icon(emoji), Text(" "), Strong(label), Text(" by "), by, Text(" "), when)
    card = _card(ask, f"{ask.decision or 'decided'}: {ask.text[:150]}", line)
    return replace(card, state="decided", decided_by=ask.decided_by or "")
