"""Follow-ups: the table, written once for both dialects, and every statement on it.

A follow-up is a note a task scheduled for itself; when it is due it is appended to the task's
inbox like a message (``Store.fire_follow_ups``). ``state`` moves once, from ``pending`` to
``fired`` or ``cancelled``; ``fire_id`` names the one fire call that moved it, so only that call
appends the inbox item (the claim that makes firing happen once across instances and restarts).
``refusal`` (set by the sweep when the person it runs for is no longer allowed) replaces the inbox
payload: the run then posts a short note instead of calling the model.
"""

from __future__ import annotations

from typing import Final

from .sql import Procedure, Statement, typed

#: Migration v10. ``DOUBLE PRECISION`` is a float8 on Postgres and REAL affinity on SQLite.
FOLLOW_UPS_DDL: Final[tuple[str, ...]] = (
    """CREATE TABLE follow_ups (
        follow_up TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        requester TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        note TEXT NOT NULL,
        payload TEXT NOT NULL,
        due_at DOUBLE PRECISION NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'fired', 'cancelled')),
        refusal TEXT,
        fire_id TEXT,
        fired_at DOUBLE PRECISION,
        cancelled_at DOUBLE PRECISION
    )""",
    "CREATE INDEX follow_ups_due ON follow_ups (due_at) WHERE state = 'pending'",
    "CREATE INDEX follow_ups_task ON follow_ups (task_id, state)",
    "CREATE INDEX follow_ups_fire ON follow_ups (fire_id)",
)

FOLLOW_UP_COLUMNS = (
    "follow_up, task_id, requester, channel, thread_ts, note, due_at, created_at, state, fired_at"
)

_LEASE_FREE = "NOT EXISTS (SELECT 1 FROM leases l WHERE l.task_id = f.task_id AND l.expires_at > :now)"

#: ``Store.schedule_follow_up``: inserted only within every bound (pending per task, per person — a
#: follow-up for nobody, ``''``, has no person's bound — and per install).
SCHEDULE_FOLLOW_UP: Final = Statement(
    "INSERT INTO follow_ups (follow_up, task_id, requester, channel, thread_ts, note, payload, due_at,"
    " created_at) SELECT :follow_up, :task_id, :requester, :channel, :thread_ts, :note, :payload,"
    " :due_at, :now"
    " WHERE (SELECT COUNT(*) FROM follow_ups WHERE task_id = :task_id AND state = 'pending') < :per_task"
    " AND (:requester = '' OR (SELECT COUNT(*) FROM follow_ups"
    " WHERE requester = :requester AND state = 'pending') < :per_person)"
    " AND (SELECT COUNT(*) FROM follow_ups WHERE state = 'pending') < :install_max"
    " RETURNING follow_up"
)
COUNT_PERSON_PENDING: Final = Statement(
    "SELECT COUNT(*) AS n FROM follow_ups WHERE requester = :requester AND state = 'pending'"
)
COUNT_TASK_PENDING: Final = Statement(
    "SELECT COUNT(*) AS n FROM follow_ups WHERE task_id = :task_id AND state = 'pending'"
)
TASK_FOLLOW_UPS: Final = Statement(
    f"SELECT {FOLLOW_UP_COLUMNS} FROM follow_ups WHERE task_id = :task_id AND state = 'pending'"
    " ORDER BY due_at, follow_up"
)
GET_FOLLOW_UP: Final = Statement(
    f"SELECT {FOLLOW_UP_COLUMNS} FROM follow_ups WHERE task_id = :task_id AND follow_up = :follow_up"
)
CANCEL_FOLLOW_UP: Final = Statement(
    "UPDATE follow_ups SET state = 'cancelled', cancelled_at = :now"
    " WHERE task_id = :task_id AND follow_up = :follow_up AND state = 'pending' RETURNING follow_up"
)
#: Pending follow-ups across the install, soonest first (the ``follow-ups`` command, the sweep's checks).
PENDING_FOLLOW_UPS: Final = Statement(
    f"SELECT {FOLLOW_UP_COLUMNS} FROM follow_ups WHERE state = 'pending'"
    " AND due_at <= :before ORDER BY due_at, follow_up LIMIT :limit"
)
NEXT_FOLLOW_UP_DUE: Final = Statement("SELECT MIN(due_at) AS due_at FROM follow_ups WHERE state = 'pending'")
REFUSE_FOLLOW_UP: Final = Statement(
    "UPDATE follow_ups SET refusal = :refusal WHERE follow_up = :follow_up AND state = 'pending'"
)
FIRED_FOLLOW_UPS: Final = Statement(
    f"SELECT {FOLLOW_UP_COLUMNS} FROM follow_ups WHERE fire_id = :fire_id ORDER BY due_at, follow_up"
)
#: Fired and cancelled follow-ups older than ``:cutoff``, one bounded batch (``prune_follow_ups``).
PRUNE_FOLLOW_UPS: Final = Statement(
    "DELETE FROM follow_ups WHERE follow_up IN (SELECT follow_up FROM follow_ups"
    " WHERE state <> 'pending' AND COALESCE(fired_at, cancelled_at, created_at) < :cutoff"
    " LIMIT :batch{skip_locked})"
)
COUNT_PENDING: Final = Statement("SELECT COUNT(*) AS n FROM follow_ups WHERE state = 'pending'")
FOLLOW_UP_COUNTS: Final = Statement("SELECT state, COUNT(*) AS n FROM follow_ups GROUP BY state")

#: ``Store.fire_follow_ups``: up to ``:limit`` due follow-ups of tasks whose lease is free move to
#: ``fired`` under this call's ``:fire_id`` and are appended to their task's inbox, in one
#: transaction. On Postgres concurrent firers skip each other's rows (``SKIP LOCKED``), and a row
#: re-checked after a wait is no longer ``pending``: each follow-up is fired by exactly one call.
FIRE_FOLLOW_UPS: Final = Procedure(
    name="fire_follow_ups",
    params=typed("now:real limit:bigint fire_id"),
    returns=typed("fired:bigint"),
    steps=(
        Statement(
            "UPDATE follow_ups SET state = 'fired', fired_at = :now, fire_id = :fire_id"
            " WHERE state = 'pending' AND follow_up IN (SELECT f.follow_up FROM follow_ups f"
            f" WHERE f.state = 'pending' AND f.due_at <= :now AND {_LEASE_FREE}"
            " ORDER BY f.due_at LIMIT :limit{skip_locked})"
        ),
        Statement(
            "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
            " SELECT task_id, channel, follow_up, thread_ts, COALESCE(refusal, payload), :now"
            " FROM follow_ups WHERE fire_id = :fire_id ORDER BY due_at, follow_up"
        ),
        Statement("SELECT COUNT(*) AS fired FROM follow_ups WHERE fire_id = :fire_id"),
    ),
)
