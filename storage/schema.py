"""Versioned schema for both backends.

Each migration is a numbered list of statements per dialect. ``migrate()`` applies the versions
above the highest one recorded in ``schema_version``, in order, in one transaction that also records
them (a crash mid-way leaves the old version). Append migrations; never edit an applied one. The
store's statements are in ``statements.py``; :func:`migration` is the runner both backends drive.

Tables (same shape on both dialects):

- ``tasks``: one row per task; ``enabled_tools`` is JSON text on SQLite, ``text[]`` on Postgres.
- ``conversations``: conversation key ``(channel, thread_ts)`` → task. Its foreign key is
  deferred so a new task can claim its key before the task row exists (see ``statements.CLAIM``).
- ``event_claims`` / ``message_claims``: the two claim keys of ingress; their primary
  keys are what makes a claim happen once. ``claimed_at`` lets ``prune_claims`` drop old keys;
  ``claim_id`` (v3) names the claim call that took the key (``statements.CLAIM``).
- ``inbox``: claimed messages not yet consumed; a saved run deletes what it consumed.
  Ids are never reused (``AUTOINCREMENT`` / identity) so a stale id cannot consume a newer item.
- ``leases``: at most one owner per task.
- ``instances`` (v5): lease owners that tied their liveness to something that ends with their
  process (``register_instance``), with the key of that lock; see ``dead_owners``.
- ``handles``: unique per ``(task_id, kind, ref)`` and per ``(task_id, handle)``.
- ``effects``: the journal of Slack writes; ``seq`` keeps insertion order.
- ``model_usage`` (v7): one row per model request (tokens by kind) with its task, person, channel,
  model and UTC ``day``; budgets and ``python -m app usage`` sum it by day. ``tasks.summary`` (v7)
  is the compacted summary of a long conversation's older turns (``app/runs/compaction.py``).
- ``approvals`` (v8): gated tool calls waiting for (or given) a person's decision. ``decision`` is
  NULL while open; ``decision_id`` names the one decide call that set it (``statements.DECIDE``);
  ``executed_at`` is set once, before an approved call runs (at most once: "Approvals show everything").
- ``follow_ups`` (v10), ``asks`` (v11): what tasks scheduled, what the agent asked people.
- ``stops``, ``agent_sessions`` (v12): a person's Stop waiting to be settled; a session's title.
- ``mcp_tokens``, ``mcp_authorizations`` (v13): per-person MCP credentials, encrypted by the caller,
  and the authorizations people were asked for (``mcp_token_statements.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .ask_statements import ASKS_POSTGRES, ASKS_SQLITE
from .follow_up_statements import FOLLOW_UPS_DDL
from .mcp_token_statements import MCP_TOKENS_POSTGRES, MCP_TOKENS_SQLITE
from .sql import Dialect, DialectName, Script, Statement
from .statements import PROCEDURES, RECORD_VERSION, SCHEMA_VERSION
from .stop_statements import STOPS_POSTGRES, STOPS_SQLITE

SCHEMA_VERSION_DDL: Final[dict[DialectName, str]] = {
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    ),
    "postgres": (
        "CREATE TABLE IF NOT EXISTS schema_version"
        " (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
    ),
}

#: v1, written once: its column types and table options are the fields each dialect fills in
#: (:data:`_V1_SPELLING`).
_V1: Final[tuple[str, ...]] = (
    """CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        transcript {bytes},
        enabled_tools {texts},
        created_at {real} NOT NULL
    )""",
    """CREATE TABLE conversations (
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        task_id TEXT NOT NULL REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
        PRIMARY KEY (channel, thread_ts)
    ){rowid}""",
    """CREATE TABLE event_claims (
        event_id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        claimed_at {real} NOT NULL
    ){rowid}""",
    # task_id is NULL only inside the claiming transaction (the claim is taken before the task is known).
    """CREATE TABLE message_claims (
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        event_id TEXT NOT NULL,
        task_id TEXT REFERENCES tasks (task_id),
        claimed_at {real} NOT NULL,
        PRIMARY KEY (channel, ts)
    ){rowid}""",
    """CREATE TABLE inbox (
        item_id {serial},
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        channel TEXT NOT NULL,
        ts TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at {real} NOT NULL
    )""",
    "CREATE INDEX inbox_task ON inbox (task_id, item_id)",
    """CREATE TABLE leases (
        task_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at {real} NOT NULL
    ){rowid}""",
    """CREATE TABLE handles (
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        handle TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('msg', 'file')),
        ref TEXT NOT NULL,
        authored {flag},
        data TEXT NOT NULL DEFAULT '{{}}',
        PRIMARY KEY (task_id, handle),
        UNIQUE (task_id, kind, ref)
    ){rowid}""",
    """CREATE TABLE effects (
        seq {serial},
        effect_id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'done')),
        result TEXT,
        created_at {real} NOT NULL
    )""",
    "CREATE INDEX effects_open ON effects (task_id, seq) WHERE state = 'open'",
)
_V1_SPELLING: Final[dict[DialectName, dict[str, str]]] = {
    "sqlite": {
        "real": "REAL",
        "bytes": "BLOB NOT NULL DEFAULT x''",
        "texts": "TEXT NOT NULL DEFAULT '[]'",
        "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "flag": "INTEGER NOT NULL DEFAULT 0",
        "rowid": " WITHOUT ROWID",
    },
    "postgres": {
        "real": "DOUBLE PRECISION",
        "bytes": "BYTEA NOT NULL DEFAULT '\\x'",
        "texts": "TEXT[] NOT NULL DEFAULT '{}'",
        "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "flag": "BOOLEAN NOT NULL DEFAULT FALSE",
        "rowid": "",
    },
}
_V1_SQLITE: Final = tuple(text.format_map(_V1_SPELLING["sqlite"]) for text in _V1)
_V1_POSTGRES: Final = tuple(text.format_map(_V1_SPELLING["postgres"]) for text in _V1)

#: v2 (dropped again by v3): a claim in one round trip on Postgres, written in plpgsql. Inside a plpgsql
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

#: v3: one definition of a claim for both backends (``statements.CLAIM``), which marks the keys it
#: takes with its call's ``claim_id``; on Postgres it runs as a function generated from the same
#: statements (``sql.Procedure``), so v2's hand-written function goes.
_V3_SQLITE: Final[tuple[str, ...]] = (
    "ALTER TABLE event_claims ADD COLUMN claim_id TEXT",
    "ALTER TABLE message_claims ADD COLUMN claim_id TEXT",
)
_V3_POSTGRES: Final[tuple[str, ...]] = (
    *_V3_SQLITE,
    "DROP FUNCTION IF EXISTS tb_claim_message(TEXT, TEXT, TEXT, TEXT, BOOLEAN, TEXT, DOUBLE PRECISION, TEXT)",
)

#: v4: conversations by task. A claim or ``create_task`` maps the key before the task row exists (the
#: deferred foreign key); meanwhile SQLite looks for the child rows of every task inserted (without
#: this index a scan per new task). On Postgres it serves the foreign key check of a dropped task.
_V4: Final[tuple[str, ...]] = ("CREATE INDEX conversations_task ON conversations (task_id)",)

#: v5: instances whose liveness the store can check, so their leases are taken over when they die.
_V5: Final[tuple[str, ...]] = (
    "CREATE TABLE instances (owner TEXT PRIMARY KEY, lock_key BIGINT NOT NULL, started_at REAL NOT NULL)",
)

#: v6: feedback on answers (the feedback buttons), one per person and message; ``shown`` once a run
#: has shown it to the model.
_V6_FEEDBACK = """CREATE TABLE feedback (
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        message TEXT NOT NULL,
        user_id TEXT NOT NULL,
        user_name TEXT NOT NULL DEFAULT '',
        kind TEXT NOT NULL CHECK (kind IN ('positive', 'negative')),
        clicked_at {real} NOT NULL,
        shown INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (task_id, message, user_id)
    )"""
_V6_SQLITE: Final[tuple[str, ...]] = (_V6_FEEDBACK.format(real="REAL"),)
_V6_POSTGRES: Final[tuple[str, ...]] = (_V6_FEEDBACK.format(real="DOUBLE PRECISION"),)

#: v7: model usage per request, and a conversation's compacted summary on its task.
_V7_USAGE = """CREATE TABLE model_usage (
        task_id TEXT NOT NULL,
        person TEXT NOT NULL,
        channel TEXT NOT NULL,
        model TEXT NOT NULL,
        day TEXT NOT NULL,
        at {real} NOT NULL,
        input_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL,
        cache_read_tokens BIGINT NOT NULL,
        cache_write_tokens BIGINT NOT NULL,
        requests BIGINT NOT NULL
    )"""
_V7_COMMON: Final[tuple[str, ...]] = (
    "CREATE INDEX model_usage_day ON model_usage (day, person)",
    "ALTER TABLE tasks ADD COLUMN summary TEXT NOT NULL DEFAULT ''",
)
_V7_SQLITE: Final[tuple[str, ...]] = (_V7_USAGE.format(real="REAL"), *_V7_COMMON)
_V7_POSTGRES: Final[tuple[str, ...]] = (_V7_USAGE.format(real="DOUBLE PRECISION"), *_V7_COMMON)

#: v8: approvals, one row per gated call (``app/approvals.py``).
_V8_SQLITE: Final[tuple[str, ...]] = (
    """CREATE TABLE approvals (
        approval_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        tool_call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        requester TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        card_effect TEXT NOT NULL,
        card_ts TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        decision TEXT,
        decided_by TEXT,
        decided_at REAL,
        decision_id TEXT,
        executed_at REAL
    ) WITHOUT ROWID""",
    "CREATE INDEX approvals_task ON approvals (task_id, tool_call_id)",
    "CREATE INDEX approvals_open ON approvals (created_at) WHERE decision IS NULL",
)
_V8_POSTGRES: Final[tuple[str, ...]] = (
    _V8_SQLITE[0].replace(" REAL", " DOUBLE PRECISION").replace(" WITHOUT ROWID", ""),
    *_V8_SQLITE[1:],
)

#: v9: ``leases.token`` (fences a run's writes), ``tasks.run_open`` (checkpointed mid-way).
_V9: Final[tuple[str, ...]] = (
    "ALTER TABLE leases ADD COLUMN token TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE tasks ADD COLUMN run_open BOOLEAN NOT NULL DEFAULT FALSE",
    "ALTER TABLE effects ADD COLUMN call_id TEXT NOT NULL DEFAULT ''",
    "CREATE INDEX tasks_run_open ON tasks (task_id) WHERE run_open",
)

MIGRATIONS: Final[tuple[tuple[int, dict[DialectName, tuple[str, ...]]], ...]] = (
    (1, {"sqlite": _V1_SQLITE, "postgres": _V1_POSTGRES}),
    (2, {"sqlite": (), "postgres": _V2_POSTGRES}),
    (3, {"sqlite": _V3_SQLITE, "postgres": _V3_POSTGRES}),
    (4, {"sqlite": _V4, "postgres": _V4}),
    (5, {"sqlite": _V5, "postgres": _V5}),
    (6, {"sqlite": _V6_SQLITE, "postgres": _V6_POSTGRES}),
    (7, {"sqlite": _V7_SQLITE, "postgres": _V7_POSTGRES}),
    (8, {"sqlite": _V8_SQLITE, "postgres": _V8_POSTGRES}),
    (9, {"sqlite": _V9, "postgres": _V9}),
    (10, {"sqlite": FOLLOW_UPS_DDL, "postgres": FOLLOW_UPS_DDL}),
    (11, {"sqlite": ASKS_SQLITE, "postgres": ASKS_POSTGRES}),
    (12, {"sqlite": STOPS_SQLITE, "postgres": STOPS_POSTGRES}),
    (13, {"sqlite": MCP_TOKENS_SQLITE, "postgres": MCP_TOKENS_POSTGRES}),
)

LATEST_VERSION: Final[int] = MIGRATIONS[-1][0]  # MIGRATIONS: ``(version, {dialect: statements})``


def pending(dialect: DialectName, current: int) -> list[tuple[int, tuple[str, ...]]]:
    """Migrations above ``current``, in order."""
    return [(version, steps[dialect]) for version, steps in MIGRATIONS if version > current]


def migration(dialect: Dialect, prelude: Sequence[tuple[Statement, Mapping[str, Any]]] = ()) -> Script:
    """The migration runner, a :data:`~storage.sql.Script` each backend drives in one transaction:
    ``prelude`` (Postgres: its lock and schema), the version table, the pending migrations each
    recorded, then (Postgres) the functions of the procedures, created or replaced."""
    for step in prelude:  # noqa: UP028 (``yield from`` would forward send() to a list)
        yield step
    yield Statement(SCHEMA_VERSION_DDL[dialect.name], verbatim=True), {}
    [row] = yield SCHEMA_VERSION, {}
    # A newer schema than this code knows is left alone: migrations are additive,
    # so an older instance keeps working during a rolling deploy.
    for version, statements in pending(dialect.name, int(row["version"])):
        for text in statements:
            yield Statement(text, verbatim=True), {}
        yield RECORD_VERSION, {"version": version, "applied_at": time.time()}
    if dialect.name == "postgres":
        for procedure in PROCEDURES:
            _, create = procedure.function
            yield Statement(create, verbatim=True), {}
