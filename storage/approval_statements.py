"""The statements of approvals (``Store.open_approval`` … ``start_execution``), written once for both
dialects like the rest of ``statements.py``."""

from __future__ import annotations

from typing import Final

from .sql import Procedure, SqlType, Statement

APPROVAL_COLUMNS = (
    "approval_id, task_id, tool_call_id, tool, args, requester, channel, thread_ts, card_effect, card_ts,"
    " created_at, decision, decided_by, decided_at, executed_at"
)

#: ``Store.open_approval``: the approval and the journal entry of its card, in one transaction.
OPEN_APPROVAL: Final = Procedure(
    name="open_approval",
    params=(
        ("approval_id", SqlType.TEXT),
        ("task_id", SqlType.TEXT),
        ("tool_call_id", SqlType.TEXT),
        ("tool", SqlType.TEXT),
        ("args", SqlType.TEXT),
        ("requester", SqlType.TEXT),
        ("channel", SqlType.TEXT),
        ("thread_ts", SqlType.TEXT),
        ("card_effect", SqlType.TEXT),
        ("card_args", SqlType.TEXT),
        ("now", SqlType.REAL),
    ),
    returns=(("opened", SqlType.BOOL),),
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

GET_APPROVAL: Final = Statement(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = :approval_id")
TASK_APPROVALS: Final = Statement(
    f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE task_id = :task_id ORDER BY created_at, approval_id"
)
HAS_OPEN_APPROVAL: Final = Statement(
    "SELECT EXISTS (SELECT 1 FROM approvals WHERE task_id = :task_id AND decision IS NULL) AS waiting"
)
SET_APPROVAL_CARD: Final = Statement(
    "UPDATE approvals SET card_ts = :card_ts WHERE approval_id = :approval_id RETURNING approval_id"
)
#: Open approvals created before ``:before`` (the expiry sweep), oldest first.
EXPIRED_APPROVALS: Final = Statement(
    f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE decision IS NULL AND created_at < :before"
    " ORDER BY created_at LIMIT :limit"
)
#: Marks an approved call as started; a row comes back only for the first caller.
START_EXECUTION: Final = Statement(
    "UPDATE approvals SET executed_at = :now"
    " WHERE approval_id = :approval_id AND decision = 'approved' AND executed_at IS NULL"
    " RETURNING approval_id"
)

#: ``Store.decide_approval``: the first decision wins. ``decision_id`` is fresh per call and marks
#: the decision this call set, so only that call appends the inbox item that resumes the task; on
#: Postgres a concurrent decider waits on the row and then finds it decided.
DECIDE: Final = Procedure(
    name="decide_approval",
    params=(
        ("approval_id", SqlType.TEXT),
        ("decision", SqlType.TEXT),
        ("user_id", SqlType.TEXT),
        ("now", SqlType.REAL),
        ("payload", SqlType.TEXT),
        ("decision_id", SqlType.TEXT),
    ),
    returns=(("won", SqlType.BOOL),),
    steps=(
        Statement(
            "UPDATE approvals SET decision = :decision, decided_by = :user_id, decided_at = :now,"
            " decision_id = :decision_id WHERE approval_id = :approval_id AND decision IS NULL"
        ),
        Statement(
            "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
            " SELECT task_id, channel, card_ts, thread_ts, :payload, :now FROM approvals"
            " WHERE approval_id = :approval_id AND decision_id = :decision_id"
        ),
        Statement(
            "SELECT EXISTS (SELECT 1 FROM approvals"
            " WHERE approval_id = :approval_id AND decision_id = :decision_id) AS won"
        ),
    ),
)
