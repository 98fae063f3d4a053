"""The statements of model usage and feedback, written once for both dialects like the rest
(``statements.py`` re-exports every name here)."""

from __future__ import annotations

from typing import Final

from .sql import Statement

# -- model usage -----------------------------------------------------------------------------

RECORD_USAGE: Final = Statement(
    "INSERT INTO model_usage (task_id, person, channel, model, day, at, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, requests) VALUES (:task_id, :person, :channel, :model,"
    " :day, :at, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens, :requests)",
    # Synced by the run's next checkpoint or save (``Statement.synced``): a power loss can lose the
    # usage of the requests since then, never a claim or a journal entry.
    synced=False,
)
#: Input plus output tokens of one UTC day, of everyone (``:person`` NULL) or of one person.
TOKENS_SPENT: Final = Statement(
    "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) AS spent FROM model_usage"
    " WHERE day = :day AND (CAST(:person AS TEXT) IS NULL OR person = :person)"
)
#: The person a task's newest model request since UTC ``:since`` was charged to (a run resumed from
#: a checkpoint that consumed its message asks for the person it runs for); the day index bounds it.
RECENT_REQUESTER: Final = Statement(
    "SELECT person FROM model_usage WHERE day >= :since AND task_id = :task_id AND person <> ''"
    " ORDER BY at DESC LIMIT 1"
)
USAGE_BY_DAY: Final = Statement(
    "SELECT day, person, channel, SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,"
    " SUM(cache_read_tokens) AS cache_read_tokens, SUM(cache_write_tokens) AS cache_write_tokens,"
    " SUM(requests) AS requests FROM model_usage WHERE day >= :since"
    " GROUP BY day, person, channel ORDER BY day, person, channel"
)

#: One person's usage of one UTC day summed by model (what ``/threadbound usage`` prices).
PERSON_USAGE_BY_MODEL: Final = Statement(
    "SELECT day, person, '' AS channel, model, SUM(input_tokens) AS input_tokens,"
    " SUM(output_tokens) AS output_tokens, SUM(cache_read_tokens) AS cache_read_tokens,"
    " SUM(cache_write_tokens) AS cache_write_tokens, SUM(requests) AS requests FROM model_usage"
    " WHERE day = :day AND person = :person GROUP BY day, person, model ORDER BY model"
)

#: The tasks one person's model requests ran in since a UTC day, the latest first.
PERSON_TASKS: Final = Statement(
    "SELECT u.task_id AS task_id, t.channel AS channel, t.thread_ts AS thread_ts, MAX(u.at) AS last_at"
    " FROM model_usage u JOIN tasks t ON t.task_id = u.task_id"
    " WHERE u.person = :person AND u.day >= :since"
    " GROUP BY u.task_id, t.channel, t.thread_ts ORDER BY last_at DESC LIMIT :limit"
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
