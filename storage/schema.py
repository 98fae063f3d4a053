"""Versioned schema for both backends.

Each migration is a numbered list of statements per dialect. ``migrate()`` applies
the versions above the highest one recorded in ``schema_version``, in order, inside
one transaction that also records them, so a crash mid-way leaves the old version.
Append new migrations; never edit an applied one. Queries both backends share
(modulo the parameter placeholder) live here too.

Tables (same shape on both dialects):

- ``tasks``: one row per task; ``enabled_tools`` is JSON text on SQLite, ``text[]`` on Postgres.
- ``conversations``: conversation key ``(channel, thread_ts)`` → task. Its foreign key is
  deferred so a new task can claim its key before the task row exists (see PostgresStore._create).
- ``event_claims`` / ``message_claims``: the two claim keys of ingress; their primary
  keys are what makes a claim happen once. ``claimed_at`` lets ``prune_claims`` drop old keys.
- ``inbox``: claimed messages not yet consumed; a saved run deletes what it consumed.
  Ids are never reused (``AUTOINCREMENT`` / identity) so a stale id cannot consume a newer item.
- ``leases``: at most one owner per task.
- ``handles``: unique per ``(task_id, kind, ref)`` and per ``(task_id, handle)``.
- ``effects``: the journal of Slack writes; ``seq`` keeps insertion order.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final, Literal

from .base import StoreStats

Dialect = Literal["sqlite", "postgres"]

SCHEMA_VERSION_DDL: Final[dict[Dialect, str]] = {
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    ),
    "postgres": (
        "CREATE TABLE IF NOT EXISTS schema_version"
        " (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
    ),
}

_V1_SQLITE: Final[tuple[str, ...]] = (
    """CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        transcript BLOB NOT NULL DEFAULT x'',
        enabled_tools TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE conversations (
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        task_id TEXT NOT NULL REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
        PRIMARY KEY (channel, thread_ts)
    ) WITHOUT ROWID""",
    """CREATE TABLE event_claims (
        event_id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        claimed_at REAL NOT NULL
    ) WITHOUT ROWID""",
    # task_id is NULL only inside the claiming transaction (the claim is taken before the task is known).
    """CREATE TABLE message_claims (
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        event_id TEXT NOT NULL,
        task_id TEXT REFERENCES tasks (task_id),
        claimed_at REAL NOT NULL,
        PRIMARY KEY (channel, ts)
    ) WITHOUT ROWID""",
    """CREATE TABLE inbox (
        item_id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX inbox_task ON inbox (task_id, item_id)",
    """CREATE TABLE leases (
        task_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE handles (
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        handle TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('msg', 'file')),
        ref TEXT NOT NULL,
        authored INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (task_id, handle),
        UNIQUE (task_id, kind, ref)
    ) WITHOUT ROWID""",
    """CREATE TABLE effects (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        effect_id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'done')),
        result TEXT,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX effects_open ON effects (task_id, seq) WHERE state = 'open'",
)

_V1_POSTGRES: Final[tuple[str, ...]] = (
    """CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        transcript BYTEA NOT NULL DEFAULT '\\x',
        enabled_tools TEXT[] NOT NULL DEFAULT '{}',
        created_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE conversations (
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        task_id TEXT NOT NULL REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
        PRIMARY KEY (channel, thread_ts)
    )""",
    """CREATE TABLE event_claims (
        event_id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        claimed_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE message_claims (
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        event_id TEXT NOT NULL,
        task_id TEXT REFERENCES tasks (task_id),
        claimed_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (channel, ts)
    )""",
    """CREATE TABLE inbox (
        item_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX inbox_task ON inbox (task_id, item_id)",
    """CREATE TABLE leases (
        task_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE handles (
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        handle TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('msg', 'file')),
        ref TEXT NOT NULL,
        authored BOOLEAN NOT NULL DEFAULT FALSE,
        data TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (task_id, handle),
        UNIQUE (task_id, kind, ref)
    )""",
    """CREATE TABLE effects (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        effect_id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'done')),
        result TEXT,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX effects_open ON effects (task_id, seq) WHERE state = 'open'",
)

#: v2: a claim in one round trip on Postgres (``PostgresStore.claim_message``). Inside a plpgsql
#: function each statement takes a fresh snapshot (READ COMMITTED), so after ``ON CONFLICT`` waited
#: for a concurrent transaction, the next statement sees what it committed; one plain statement
#: could not. Keys in a fixed order: the event id (a redelivery waits on the first delivery), the
#: conversation (claims starting one thread wait on the first, whose task they then join), the
#: message (deliveries of one message under two event ids: the second waits, then is a duplicate).
#: ``no_task`` writes nothing; a ``duplicate`` keeps only its event id. The message key is taken
#: once the task is known, so its row is written whole (no UPDATE of it afterwards).
#: Tables resolve through the caller's search_path (the store's schema). SQLite needs nothing.
_V2_POSTGRES: Final[tuple[str, ...]] = (
    """CREATE FUNCTION tb_claim_message(
        p_event_id TEXT, p_channel TEXT, p_ts TEXT, p_thread_ts TEXT, p_create BOOLEAN,
        p_payload TEXT, p_now DOUBLE PRECISION, p_new_task_id TEXT,
        OUT status TEXT, OUT task_id TEXT, OUT item_id BIGINT, OUT created BOOLEAN
    ) LANGUAGE plpgsql AS $$
    DECLARE
        v_task TEXT;
    BEGIN
        created := false;
        SELECT c.task_id INTO v_task FROM conversations c
            WHERE c.channel = p_channel AND c.thread_ts = p_thread_ts;
        -- Unknown conversation and nothing to create: no_task without a write, unless a key was
        -- claimed before (then the claim is a duplicate, below).
        IF v_task IS NULL AND NOT p_create
            AND NOT EXISTS (SELECT 1 FROM event_claims e WHERE e.event_id = p_event_id)
            AND NOT EXISTS (SELECT 1 FROM message_claims m WHERE m.channel = p_channel AND m.ts = p_ts)
        THEN
            status := 'no_task';
            RETURN;
        END IF;
        INSERT INTO event_claims (event_id, channel, ts, claimed_at)
            VALUES (p_event_id, p_channel, p_ts, p_now) ON CONFLICT DO NOTHING;
        -- On with a fresh event id and a task to join or create; else (no task and no create: the
        -- message key was seen taken) it is a duplicate.
        IF FOUND AND (v_task IS NOT NULL OR p_create) THEN
            IF v_task IS NULL THEN
                -- The key first (its foreign key is deferred).
                WITH mapped AS (
                    INSERT INTO conversations (channel, thread_ts, task_id)
                        VALUES (p_channel, p_thread_ts, p_new_task_id) ON CONFLICT DO NOTHING RETURNING 1
                )
                INSERT INTO tasks (task_id, channel, thread_ts, created_at)
                    SELECT p_new_task_id, p_channel, p_thread_ts, p_now FROM mapped;
                IF FOUND THEN
                    v_task := p_new_task_id;
                    created := true;
                ELSE  -- mapped by a claim that committed meanwhile: its task it is
                    SELECT c.task_id INTO STRICT v_task FROM conversations c
                        WHERE c.channel = p_channel AND c.thread_ts = p_thread_ts;
                END IF;
            END IF;
            WITH claimed AS (
                INSERT INTO message_claims (channel, ts, event_id, task_id, claimed_at)
                    VALUES (p_channel, p_ts, p_event_id, v_task, p_now) ON CONFLICT DO NOTHING RETURNING 1
            )
            INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)
                SELECT v_task, p_channel, p_ts, p_thread_ts, p_payload, p_now FROM claimed
                RETURNING inbox.item_id INTO item_id;
            IF FOUND THEN
                task_id := v_task;
                status := 'claimed';
                RETURN;
            END IF;
        END IF;
        -- A duplicate: of its event id, or of its message under another event id. The event id
        -- stays recorded; a task created above for it is dropped again.
        IF created THEN
            DELETE FROM conversations c
                WHERE c.channel = p_channel AND c.thread_ts = p_thread_ts AND c.task_id = v_task;
            DELETE FROM tasks t WHERE t.task_id = v_task;
            created := false;
        END IF;
        item_id := NULL;
        status := 'duplicate';
        SELECT m.task_id INTO task_id FROM message_claims m WHERE m.channel = p_channel AND m.ts = p_ts;
    END
    $$""",
)

#: ``(version, {dialect: statements})``, ascending.
MIGRATIONS: Final[tuple[tuple[int, dict[Dialect, tuple[str, ...]]], ...]] = (
    (1, {"sqlite": _V1_SQLITE, "postgres": _V1_POSTGRES}),
    (2, {"sqlite": (), "postgres": _V2_POSTGRES}),
)

LATEST_VERSION: Final[int] = MIGRATIONS[-1][0]


def pending(dialect: Dialect, current: int) -> list[tuple[int, tuple[str, ...]]]:
    """Migrations above ``current``, in order."""
    return [(version, steps[dialect]) for version, steps in MIGRATIONS if version > current]


# -- shared by both backends ---------------------------------------------------------


def new_task_id() -> str:
    return uuid.uuid4().hex


#: Tasks with pending inbox items or open effects and no live lease, longest-waiting first.
#: ``{now}`` is the dialect's placeholder for the caller's clock.
DUE_TASKS_SQL: Final[str] = """
SELECT due.task_id FROM (
    SELECT task_id, MIN(created_at) AS since FROM inbox GROUP BY task_id
    UNION ALL
    SELECT task_id, MIN(created_at) AS since FROM effects WHERE state = 'open' GROUP BY task_id
) AS due
WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.task_id = due.task_id AND l.expires_at > {now})
GROUP BY due.task_id
ORDER BY MIN(due.since), due.task_id
"""

#: Sets the origin thread only while it is still empty: the first posted root becomes the origin,
#: later roots are only mapped (``record_root``). Returns a row iff the task exists.
SET_THREAD_SQL: Final[str] = (
    "UPDATE tasks SET thread_ts = CASE WHEN thread_ts = '' THEN {thread} ELSE thread_ts END"
    " WHERE task_id = {task} RETURNING true"
)

#: One row of counts; ``tasks`` and ``pending_inbox`` are StoreStats fields, the rest go to ``extra``.
STATS_SQL: Final[str] = """
SELECT
    (SELECT COUNT(*) FROM tasks) AS tasks,
    (SELECT COUNT(*) FROM inbox) AS pending_inbox,
    (SELECT COUNT(*) FROM effects WHERE state = 'open') AS open_effects,
    (SELECT COUNT(*) FROM leases) AS leases,
    (SELECT COUNT(*) FROM handles) AS handles,
    (SELECT COUNT(*) FROM conversations) AS conversations
"""


def stats_from_counts(counts: Mapping[str, Any]) -> StoreStats:
    values = {key: int(value) for key, value in counts.items()}
    return StoreStats(tasks=values.pop("tasks"), pending_inbox=values.pop("pending_inbox"), extra=values)
