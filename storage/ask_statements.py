"""The ``asks`` table and its statements: questions (``q_…``) and approvals (``ap_…``) the agent
itself asked in a thread (``app/agent/asks.py``). Written once for both dialects.

Unlike operator-gated approvals (``approval_statements.py``) an open ask does not hold the task's
inbox: the run that asked ended, messages go on arriving (a free-text answer is one of them), and
the answer is an inbox item of its own.
"""

from __future__ import annotations

from typing import Final

from .card_statements import decide_card, expired_cards, get_card, set_card
from .sql import Statement

_ASKS: Final = """CREATE TABLE asks (
        ask_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        details TEXT NOT NULL DEFAULT '',
        options TEXT NOT NULL DEFAULT '[]',
        only_requester BOOLEAN NOT NULL DEFAULT TRUE,
        requester TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        card_ts TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        decision TEXT,
        answer TEXT,
        decided_by TEXT,
        decided_at REAL,
        decision_id TEXT
    )"""
_INDEXES: Final = (
    "CREATE INDEX asks_task ON asks (task_id, created_at)",
    "CREATE INDEX asks_open ON asks (created_at) WHERE decision IS NULL",
)
ASKS_SQLITE: Final[tuple[str, ...]] = (_ASKS + " WITHOUT ROWID", *_INDEXES)
ASKS_POSTGRES: Final[tuple[str, ...]] = (_ASKS.replace(" REAL", " DOUBLE PRECISION"), *_INDEXES)

ASK_COLUMNS = (
    "ask_id, task_id, kind, text, details, options, only_requester, requester, channel, thread_ts,"
    " card_ts, created_at, decision, answer, decided_by, decided_at"
)

OPEN_ASK: Final = Statement(
    "INSERT INTO asks (ask_id, task_id, kind, text, details, options, only_requester, requester,"
    " channel, thread_ts, created_at) VALUES (:ask_id, :task_id, :kind, :text, :details, :options,"
    " :only_requester, :requester, :channel, :thread_ts, :now) RETURNING ask_id"
)
GET_ASK: Final = get_card("asks", "ask_id", ASK_COLUMNS)
#: The task's open asks, oldest first.
OPEN_TASK_ASKS: Final = Statement(
    f"SELECT {ASK_COLUMNS} FROM asks WHERE task_id = :task_id AND decision IS NULL"
    " ORDER BY created_at, ask_id"
)
SET_ASK_CARD: Final = set_card("asks", "ask_id")
EXPIRED_ASKS: Final = expired_cards("asks", ASK_COLUMNS)

#: ``Store.decide_ask``: the first decision wins (``decision_id`` marks the call that set it); that
#: call alone appends ``payload`` to the task's inbox (none when ``payload`` is empty: a free-text
#: answer is itself the inbox item).
DECIDE_ASK: Final = decide_card("decide_ask", "asks", "ask_id", answer=True, optional_payload=True)
