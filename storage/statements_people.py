"""Statements about what people decide, say and spend: approvals, feedback, model usage.

Written once for both dialects like the rest (``statements.py`` re-exports every name here).
"""

from __future__ import annotations

from typing import Final

from .sql import Procedure, SqlType, Statement

APPROVAL_COLUMNS = (
    "approval_id, task_id, tool_call_id, tool, args, requester, channel, thread_ts, card_effect, card_ts,"
    " created_at, decision, decided_by, decided_at, executed_at"
)

# -- approvals ------------------------------------------------------------------------------

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

# -- model usage -----------------------------------------------------------------------------

RECORD_USAGE: Final = Statement(
    "INSERT INTO model_usage (task_id, person, channel, model, day, at, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, requests) VALUES (:task_id, :person, :channel, :model,"
    " :day, :at, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens, :requests)"
)
#: Input plus output tokens of one UTC day, of everyone (``:person`` NULL) or of one person.
TOKENS_SPENT: Final = Statement(
    "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) AS spent FROM model_usage"
    " WHERE day = :day AND (CAST(:person AS TEXT) IS NULL OR person = :person)"
)
USAGE_BY_DAY: Final = Statement(
    "SELECT day, person, channel, SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,"
    " SUM(cache_read_tokens) AS cache_read_tokens, SUM(cache_write_tokens) AS cache_write_tokens,"
    " SUM(requests) AS requests FROM model_usage WHERE day >= :since"
    " GROUP BY day, person, channel ORDER BY day, person, channel"
)

# -- feedback --------------------------------------------------------------------------------

FEEDBACK_COLUMNS = "task_id, message, user_id, user_name, kind, clicked_at"
#: A person's click on an answer's feedback buttons; a second click replaces the first.
RECORD_FEEDBACK: Final = Statement(
    "INSERT INTO feedback (task_id, message, user_id, user_name, kind, clicked_at, shown)"
    " VALUES (:task_id, :message, :user_id, :user_name, :kind, :now, 0)"
    " ON CONFLICT (task_id, message, user_id) DO UPDATE SET kind = excluded.kind,"
    " user_name = excluded.user_name, clicked_at = excluded.clicked_at, shown = 0"
)
PENDING_FEEDBACK: Final = Statement(
    f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE task_id = :task_id AND shown = 0 ORDER BY clicked_at"
)
MARK_FEEDBACK_SHOWN: Final = Statement(
    "UPDATE feedback SET shown = 1 WHERE task_id = :task_id AND shown = 0 AND clicked_at <= :upto"
)
