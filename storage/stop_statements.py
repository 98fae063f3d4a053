"""The ``stops`` and ``agent_sessions`` tables and their statements, written once for both dialects.

A stop is a person's Stop on a run in progress (Slack's agent session Stop button, the playground's,
``/threadbound stop``). It is recorded only while the conversation's lease is held (a run is in
progress): a Stop between runs records nothing. ``upto`` is the newest inbox item of the task when
the stop was asked: the stopped turn's items, consumed when the stop is settled (``SETTLE_STOP``, one
fenced transaction with the transcript); later messages are answered as usual. The row lives until
the stop is settled, so a run that crashed before settling it never takes the stopped turn up again
(invariant "A stop is final", docs/architecture.md).

``agent_sessions`` keeps the title a conversation's agent session shows (set from the first message,
kept in step with the person's renames).
"""

from __future__ import annotations

from typing import Final

from .lease_statements import fenced
from .sql import Procedure, Statement, typed

_STOPS: Final = """CREATE TABLE stops (
        task_id TEXT PRIMARY KEY,
        by_user TEXT NOT NULL,
        requested_at REAL NOT NULL,
        upto BIGINT NOT NULL
    )"""
_SESSIONS: Final = """CREATE TABLE agent_sessions (
        task_id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        updated_at REAL NOT NULL
    )"""
STOPS_SQLITE: Final[tuple[str, ...]] = (_STOPS + " WITHOUT ROWID", _SESSIONS + " WITHOUT ROWID")
STOPS_POSTGRES: Final[tuple[str, ...]] = (
    _STOPS.replace(" REAL", " DOUBLE PRECISION"),
    _SESSIONS.replace(" REAL", " DOUBLE PRECISION"),
)

_TASK_OF: Final = (
    "(SELECT c.task_id FROM conversations c WHERE c.channel = :channel AND c.thread_ts = :thread_ts)"
)

#: ``Store.request_stop``: recorded only while a live lease on the conversation's task exists and the
#: task has work (pending inbox items, or a run checkpointed and not finished): a run is in progress.
#: A lease left by a dead instance whose run was settled is no run. No stop waits already; the task's
#: id when recorded.
REQUEST_STOP: Final = Statement(
    "INSERT INTO stops (task_id, by_user, requested_at, upto)"
    " SELECT l.task_id, :by_user, :now,"
    " COALESCE((SELECT MAX(i.item_id) FROM inbox i WHERE i.task_id = l.task_id), 0)"
    f" FROM leases l WHERE l.task_id = {_TASK_OF} AND l.expires_at > :now"
    " AND (EXISTS (SELECT 1 FROM inbox i WHERE i.task_id = l.task_id)"
    " OR EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = l.task_id AND t.run_open))"
    " ON CONFLICT (task_id) DO NOTHING RETURNING task_id"
)
STOP_COLUMNS: Final = "task_id, by_user, requested_at, upto"
GET_STOP: Final = Statement(f"SELECT {STOP_COLUMNS} FROM stops WHERE task_id = :task_id")
#: Every waiting stop (the running instances' poll; a stop lives only until its run settles it).
ALL_STOPS: Final = Statement(f"SELECT {STOP_COLUMNS} FROM stops")

#: ``Store.settle_stop``: the stopped turn's transcript saved (the run closed), its items (up to the
#: stop's ``upto``, and ``consumed``: what the run was shown) consumed, its open journal entries
#: closed as they are (what was posted stays), the stop removed; all of it fenced.
SETTLE_STOP: Final = Procedure(
    name="settle_stop",
    params=typed("task_id transcript:bytes consumed:ids stopped_result fence"),
    returns=typed("settled:bool fenced:bool"),
    steps=(
        Statement(
            "UPDATE tasks SET transcript = COALESCE(:transcript, transcript), run_open = FALSE"
            f" WHERE task_id = :task_id AND {fenced()}"
        ),
        Statement(
            "DELETE FROM inbox WHERE task_id = :task_id AND (item_id IN {each:consumed}"
            f" OR item_id <= (SELECT s.upto FROM stops s WHERE s.task_id = :task_id)) AND {fenced()}"
        ),
        Statement(
            "UPDATE effects SET state = 'done', result = :stopped_result"
            f" WHERE task_id = :task_id AND state = 'open' AND {fenced()}"
        ),
        Statement(f"DELETE FROM stops WHERE task_id = :task_id AND {fenced()}"),
        Statement(
            "SELECT NOT EXISTS (SELECT 1 FROM stops WHERE task_id = :task_id) AS settled,"
            f" {fenced()} AS fenced"
        ),
    ),
)

#: ``Store.session_title`` / ``Store.set_session_title``.
GET_SESSION_TITLE: Final = Statement("SELECT title FROM agent_sessions WHERE task_id = :task_id")
SET_SESSION_TITLE: Final = Statement(
    "INSERT INTO agent_sessions (task_id, title, updated_at) VALUES (:task_id, :title, :now)"
    " ON CONFLICT (task_id) DO UPDATE SET title = :title, updated_at = :now RETURNING task_id",
    synced=False,
)
#: The title of a conversation's session, by its ``(channel, thread_ts)`` (a rename in Slack).
RENAME_SESSION: Final = Statement(
    "INSERT INTO agent_sessions (task_id, title, updated_at)"
    f" SELECT {_TASK_OF}, :title, :now WHERE {_TASK_OF} IS NOT NULL"
    " ON CONFLICT (task_id) DO UPDATE SET title = :title, updated_at = :now RETURNING task_id",
    synced=False,
)
