"""The statements of approvals (``Store.open_approval`` … ``start_execution``), written once for both
dialects like the rest of ``statements.py``."""

from __future__ import annotations

from typing import Final

from .card_statements import decide_card, expired_cards, get_card, set_card
from .sql import Procedure, Statement, typed

APPROVAL_COLUMNS = (
    "approval_id, task_id, tool_call_id, tool, args, requester, channel, thread_ts, card_effect, card_ts,"
    " created_at, decision, decided_by, decided_at, executed_at"
)

#: ``Store.open_approval``: the approval and the journal entry of its card, in one transaction.
OPEN_APPROVAL: Final = Procedure(
    name="open_approval",
    params=typed(
        "approval_id task_id tool_call_id tool args requester channel thread_ts card_effect card_args"
        " now:real"
    ),
    returns=typed("opened:bool"),
    steps=(
        Statement(
            "INSERT INTO approvals (approval_id, task_id, tool_call_id, tool, args, requester, channel,"
            " thread_ts, card_effect, created_at) VALUES (:approval_id, :task_id, :tool_call_id, :tool,"
            " :args, :requester, :channel, :thread_ts, :card_effect, :now)"
        ),
        Statement(
            "INSERT INTO effects (effect_id, task_id, tool, args, state, created_at)"
            " VALUES (:card_effect, :task_id, 'approval_card', :card_args, 'open', :now)"
        ),
        Statement("SELECT EXISTS (SELECT 1 FROM approvals WHERE approval_id = :approval_id) AS opened"),
    ),
)

GET_APPROVAL: Final = get_card("approvals", "approval_id", APPROVAL_COLUMNS)
TASK_APPROVALS: Final = Statement(
    f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE task_id = :task_id ORDER BY created_at, approval_id"
)
HAS_OPEN_APPROVAL: Final = Statement(
    "SELECT EXISTS (SELECT 1 FROM approvals WHERE task_id = :task_id AND decision IS NULL) AS waiting"
)
SET_APPROVAL_CARD: Final = set_card("approvals", "approval_id")
EXPIRED_APPROVALS: Final = expired_cards("approvals", APPROVAL_COLUMNS)
#: Marks an approved call as started; a row comes back only for the first caller.
START_EXECUTION: Final = Statement(
    "UPDATE approvals SET executed_at = :now"
    " WHERE approval_id = :approval_id AND decision = 'approved' AND executed_at IS NULL"
    " RETURNING approval_id"
)

#: ``Store.decide_approval``: the first decision wins; only the call that made it resumes the task.
DECIDE: Final = decide_card("decide_approval", "approvals", "approval_id")
