"""The record of a question (``q_…``) or approval (``ap_…``) the agent asked in a thread, or of an
MCP server's form (``el_…``: its answer is the form's JSON, or ``decline``/``cancel`` when denied)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .records import CardRecord

__all__ = ["AskDecision", "AskKind", "AskRecord"]

AskKind = Literal["question", "approval", "form"]
#: ``answered`` (a question), ``approved``/``denied`` (an approval), ``expired`` (either).
AskDecision = Literal["answered", "approved", "denied", "expired"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AskRecord(CardRecord[AskDecision]):
    """One ask and, once made, its answer or decision."""

    ask_id: str
    kind: AskKind
    #: The question, or the action the model intends to take (Markdown).
    text: str
    #: An approval's details (Markdown), ``""`` when none.
    details: str
    #: A question's option labels; empty for a free-text question (and an approval). A form's fields,
    #: one JSON object each (``app.agent.mcp.elicitation``).
    options: tuple[str, ...]
    #: Only the requester (and ``APPROVERS``) may answer; else anyone in the conversation.
    only_requester: bool
    #: The chosen option or free text (a question's answer).
    answer: str | None = None
