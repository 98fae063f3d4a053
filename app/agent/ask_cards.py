"""The cards of the agent's own asks (issue 24): a question with one button per option (or a note
that the next message answers it), an approval request with Approve/Deny; once decided, who answered
what and when, and no buttons.

The model's text goes in ``markdown`` blocks with mass mentions (``@channel``…) defused; option
labels are plain text. A button's value is ``<ask id>:<option index>`` (approvals: the ask id).
"""

from __future__ import annotations

from typing import Any

from channel.card_fields import escape
from channel.markdown import strip_mass_mentions
from storage.base import AskRecord

#: One action id per option position (Slack wants them unique within a card).
OPTION_ACTIONS = tuple(f"threadbound_ask_option_{i}" for i in range(5))
ASK_APPROVE = "threadbound_ask_approve"
ASK_DENY = "threadbound_ask_deny"

Block = dict[str, Any]


def _when(ts: float, fallback: str) -> str:
    return f"<!date^{int(ts)}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _body(ask: AskRecord) -> list[Block]:
    heading = ":grey_question: *Question*" if ask.kind == "question" else ":raised_hand: *Approval requested*"
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": heading}},
        {"type": "markdown", "text": strip_mass_mentions(ask.text)},
    ]
    if ask.details:
        blocks.append({"type": "markdown", "text": strip_mass_mentions(ask.details)})
    return blocks


def _who(ask: AskRecord) -> str:
    if not ask.only_requester:
        return "Anyone here can answer"
    return f"For <@{escape(ask.requester)}> or an approver" if ask.requester else "For an approver"


def open_card(ask: AskRecord, ttl: float) -> tuple[str, list[Block]]:
    """``(fallback text, blocks)`` of an ask waiting for its answer."""
    until = _when(ask.created_at + ttl, "in a while")
    if ask.kind == "approval":
        buttons: list[Block] = [
            _button(ASK_APPROVE, "Approve", ask.ask_id, "primary"),
            _button(ASK_DENY, "Deny", ask.ask_id, "danger"),
        ]
    else:
        buttons = [
            _button(OPTION_ACTIONS[i], label, f"{ask.ask_id}:{i}") for i, label in enumerate(ask.options)
        ]
    context = f"{_who(ask)} · open until {until}"
    if ask.kind == "question" and not ask.options:
        context = f"Reply in this thread to answer · {context}"
    blocks = [*_body(ask), {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]}]
    if buttons:
        blocks.append({"type": "actions", "block_id": "threadbound_ask", "elements": buttons})
    fallback = "Question" if ask.kind == "question" else "Approval requested"
    return f"{fallback}: {ask.text[:150]}", blocks


def decided_card(ask: AskRecord) -> tuple[str, list[Block]]:
    """``(fallback text, blocks)`` of a decided ask: who answered what, and when; no buttons."""
    when = _when(ask.decided_at or ask.created_at, "just now")
    if ask.decision == "expired":
        line = f":hourglass: *Expired* {when}: nobody answered in time."
    elif ask.decision == "answered":
        answer = escape((ask.answer or "")[:200])
        line = f":speech_balloon: <@{escape(ask.decided_by or '')}> answered *{answer}* {when}"
    else:
        label = "Approved" if ask.decision == "approved" else "Denied"
        emoji = ":white_check_mark:" if ask.decision == "approved" else ":no_entry_sign:"
        line = f"{emoji} *{label}* by <@{escape(ask.decided_by or '')}> {when}"
    blocks = [*_body(ask), {"type": "context", "elements": [{"type": "mrkdwn", "text": line}]}]
    return f"{ask.decision or 'decided'}: {ask.text[:150]}", blocks


def _button(action_id: str, label: str, value: str, style: str = "") -> Block:
    button: Block = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label[:75]},
        "value": value,
    }
    if style:
        button["style"] = style
    return button
