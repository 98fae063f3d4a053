"""The approval card: what a gated call would do, as Slack Block Kit, before and after a decision.

A card says which tool would run and with which arguments (pretty JSON, bounded, escaped so
nothing in the arguments can mention, link or break out of the code block), who asked and when it
expires, and carries the two buttons. Once decided it says who decided what, and when, and has no
buttons left. Text fallbacks keep notifications readable.
"""

from __future__ import annotations

import json
from typing import Any

from storage.base import ApprovalRecord

APPROVE = "threadbound_approve"
DENY = "threadbound_deny"

#: Characters of pretty-printed arguments shown on a card (Slack allows 3,000 per section).
MAX_ARGS_CHARS = 1500
#: Characters of a tool name shown (MCP servers name their own tools).
_MAX_TOOL_CHARS = 120

Block = dict[str, Any]

_OUTCOME = {
    "approved": (":white_check_mark:", "Approved"),
    "denied": (":no_entry_sign:", "Denied"),
    "expired": (":hourglass:", "Expired"),
    "void": (":heavy_minus_sign:", "Withdrawn"),
}


def escape(text: str) -> str:
    """Slack mrkdwn escaping: ``&``, ``<`` and ``>`` can no longer form mentions or links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def args_text(args: str) -> str:
    """The call's arguments as readable JSON, bounded to :data:`MAX_ARGS_CHARS`."""
    try:
        shown = json.dumps(json.loads(args), indent=2, ensure_ascii=False)
    except ValueError:
        shown = args
    if len(shown) > MAX_ARGS_CHARS:
        cut = len(shown) - MAX_ARGS_CHARS
        shown = f"{shown[:MAX_ARGS_CHARS]}\n… ({cut} more characters)"
    # A fence inside the arguments would end the code block early.
    return shown.replace("```", "`\u200b``")


def tool_name(approval: ApprovalRecord) -> str:
    return escape(approval.tool[:_MAX_TOOL_CHARS])


def _when(ts: float, fallback: str) -> str:
    """A date Slack shows in each reader's time zone."""
    return f"<!date^{int(ts)}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _body(approval: ApprovalRecord, heading: str) -> list[Block]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{heading} `{tool_name(approval)}` with:"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{escape(args_text(approval.args))}```"}},
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
                    {
                        "type": "button",
                        "action_id": APPROVE,
                        "text": {"type": "plain_text", "text": "Approve"},
                        "style": "primary",
                        "value": approval.approval_id,
                    },
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
