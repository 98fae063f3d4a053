"""The approval card: what a gated call would do, as Slack Block Kit, before and after a decision.

A card says which tool would run and with which arguments (every key, long values shortened,
escaped so nothing in the arguments can mention, link or break out of the code block: see
:mod:`channel.card_fields`), who asked and when it expires, and carries the two buttons. Once
decided it says who decided what, and when, and has no buttons left. Text fallbacks keep
notifications readable.
"""

from __future__ import annotations

from typing import Any

from channel.card_fields import ArgumentsUnshowable, arg_sections, escape
from storage.base import ApprovalRecord

APPROVE = "threadbound_approve"
DENY = "threadbound_deny"

#: Characters of a tool name shown (MCP servers name their own tools).
_MAX_TOOL_CHARS = 120

Block = dict[str, Any]

_OUTCOME = {
    "approved": (":white_check_mark:", "Approved"),
    "denied": (":no_entry_sign:", "Denied"),
    "expired": (":hourglass:", "Expired"),
    "void": (":heavy_minus_sign:", "Withdrawn"),
    "failed": (":warning:", "Not posted"),
}


def tool_name(approval: ApprovalRecord) -> str:
    return escape(approval.tool[:_MAX_TOOL_CHARS])


def _when(ts: float, fallback: str) -> str:
    """A date Slack shows in each reader's time zone."""
    return f"<!date^{int(ts)}^{{date_short_pretty}} at {{time}}|{fallback}>"


def showable(approval: ApprovalRecord) -> bool:
    """Whether the card can show every argument key of the call (else it cannot be approved)."""
    try:
        arg_sections(approval.args)
    except ArgumentsUnshowable:
        return False
    return True


def _body(approval: ApprovalRecord, heading: str) -> list[Block]:
    try:
        sections = arg_sections(approval.args)
    except ArgumentsUnshowable:
        # The gate denies such a call before it asks; a record from before that rule gets a card
        # without arguments and without an Approve button.
        sections = ["_(arguments too large to show; this call cannot be approved)_"]
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{heading} `{tool_name(approval)}` with:"}},
        *({"type": "section", "text": {"type": "mrkdwn", "text": text}} for text in sections),
    ]


def open_card(approval: ApprovalRecord, ttl: float) -> tuple[str, list[Block]]:
    """``(fallback text, blocks)`` of a card waiting for a decision."""
    asked = f"Asked by <@{approval.requester}>" if approval.requester else "Asked by the agent"
    expires = _when(approval.created_at + ttl, "in a while")
    return (
        f"Approval needed to run {approval.tool[:_MAX_TOOL_CHARS]}",
        [
            *_body(approval, ":raised_hand: *Approval needed* to run"),
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"{asked} · open until {expires}"}],
            },
            {
                "type": "actions",
                "block_id": "threadbound_approval",
                "elements": [
                    *(
                        [
                            {
                                "type": "button",
                                "action_id": APPROVE,
                                "text": {"type": "plain_text", "text": "Approve"},
                                "style": "primary",
                                "value": approval.approval_id,
                            }
                        ]
                        if showable(approval)
                        else []
                    ),
                    {
                        "type": "button",
                        "action_id": DENY,
                        "text": {"type": "plain_text", "text": "Deny"},
                        "style": "danger",
                        "value": approval.approval_id,
                    },
                ],
            },
        ],
    )


def decided_card(approval: ApprovalRecord) -> tuple[str, list[Block]]:
    """``(fallback text, blocks)`` of a decided card: the outcome, who and when; no buttons."""
    emoji, label = _OUTCOME.get(approval.decision or "", (":grey_question:", "Decided"))
    when = _when(approval.decided_at or approval.created_at, "just now")
    if approval.decision == "expired":
        line = f"{emoji} *{label}* {when}: nobody decided in time, so it did not run."
    elif approval.decision == "void":
        line = f"{emoji} *{label}*: the request was interrupted and is no longer pending."
    else:
        line = f"{emoji} *{label}* by <@{approval.decided_by}> {when}"
    return (
        f"{label}: {approval.tool[:_MAX_TOOL_CHARS]}",
        [
            *_body(approval, "Asked to run"),
            {"type": "context", "elements": [{"type": "mrkdwn", "text": line}]},
        ],
    )
