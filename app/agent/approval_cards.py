"""The approval card: what a gated call would do, as a neutral card (``channel.cards``), before and
after a decision.

A card says which tool would run and with which arguments (every key and every value whole, what
cannot be seen shown by code point: see :mod:`channel.card_fields`; the adapter escapes them so
nothing in the arguments can mention, link or break out of their block), who asked and when it
expires, and carries the two choices. Once decided it says who decided what, and when, and has no
choices left. The fallback text keeps notifications readable.
"""

from __future__ import annotations

from dataclasses import replace

from channel.card_fields import ArgumentsUnshowable, argument_fields
from channel.cards import Answerers, Card, Choice, Code, Emphasis, Icon, Line, Mention, Strong, Text, Time
from storage.base import ApprovalRecord

APPROVE = "threadbound_approve"
DENY = "threadbound_deny"
#: The card's group of choices.
GROUP = "threadbound_approval"

#: Characters of a tool name shown (MCP servers name their own tools).
_MAX_TOOL_CHARS = 120

_OUTCOME = {
    "approved": ("white_check_mark", "Approved"),
    "denied": ("no_entry_sign", "Denied"),
    "expired": ("hourglass", "Expired"),
    "void": ("heavy_minus_sign", "Withdrawn"),
    "failed": ("warning", "Not posted"),
}


def showable(approval: ApprovalRecord) -> bool:
    """Whether the card can show every argument of the call whole (else it cannot be approved)."""
    try:
        argument_fields(approval.args)
    except ArgumentsUnshowable:
        return False
    return True


def _card(approval: ApprovalRecord, heading: Line, fallback: str, note: Line) -> Card:
    title = (*heading, Code(approval.tool[:_MAX_TOOL_CHARS]), Text(" with:"))
    try:
        return Card(
            fallback, title, fields=argument_fields(approval.args), note=note, requester=approval.requester
        )
    except ArgumentsUnshowable:
        # The gate denies such a call before it asks; a record from before that rule gets a card
        # without arguments and without an Approve choice.
        notice = (Emphasis("(arguments too large to show; this call cannot be approved)"),)
        return Card(fallback, title, notice=notice, note=note, requester=approval.requester)


def open_card(approval: ApprovalRecord, ttl: float, answerers: Answerers = "requester") -> Card:
    """The card of a call waiting for a decision; ``answerers`` as ``APPROVAL_BY`` says."""
    asked: Line = (
        (Text("Asked by "), Mention(approval.requester))
        if approval.requester
        else (Text("Asked by the agent"),)
    )
    expires = Time(approval.created_at + ttl, "in a while")
    heading = (Icon("raised_hand"), Text(" "), Strong("Approval needed"), Text(" to run "))
    card = _card(
        approval,
        heading,
        f"Approval needed to run {approval.tool[:_MAX_TOOL_CHARS]}",
        (*asked, Text(" · open until "), expires),
    )
    approve = Choice(APPROVE, "Approve", approval.approval_id, "primary")
    deny = Choice(DENY, "Deny", approval.approval_id, "danger")
    choices = (approve, deny) if showable(approval) else (deny,)
    return replace(card, choices=choices, group=GROUP, answerers=answerers)


def decided_card(approval: ApprovalRecord) -> Card:
    """The card of a decided call: the outcome, who and when; no choices."""
    emoji, label = _OUTCOME.get(approval.decision or "", ("grey_question", "Decided"))
    when = Time(approval.decided_at or approval.created_at, "just now")
    outcome: Line = (Icon(emoji), Text(" "), Strong(label))
    if approval.decision == "expired":
        line: Line = (*outcome, Text(" "), when, Text(": nobody decided in time, so it did not run."))
    elif approval.decision == "void":
        line = (*outcome, Text(": the request was interrupted and is no longer pending."))
    else:
        line = (*outcome, Text(" by "), Mention(approval.decided_by or ""), Text(" "), when)
    card = _card(approval, (Text("Asked to run "),), f"{label}: {approval.tool[:_MAX_TOOL_CHARS]}", line)
    return replace(card, state="decided", decided_by=approval.decided_by or "")
