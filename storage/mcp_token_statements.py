"""The ``mcp_tokens`` and ``mcp_authorizations`` tables and their statements: what per-person MCP
servers (``app/agent/mcp/oauth.py``) keep. Written once for both dialects.

- ``mcp_tokens``: one row per ``(server, user_id)`` holding that person's OAuth tokens, and one row
  per server with ``user_id = ''`` holding the client the app registered there (dynamic client
  registration). Both values are ciphertext: the store never sees a token in the clear.
- ``mcp_authorizations``: one row per authorization a person was asked for, keyed by the SHA-256 of
  its ``state`` (the state itself is only in the link the person got). It is decided once
  (``connected``, ``declined`` or ``expired``); the decision appends the item that resumes the task,
  in the same transaction, like a card's (``card_statements.decide_card``).
"""

from __future__ import annotations

from typing import Final

from .card_statements import decide_card
from .sql import Statement

_TOKENS: Final = """CREATE TABLE mcp_tokens (
        server TEXT NOT NULL,
        user_id TEXT NOT NULL,
        secret TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (server, user_id)
    )"""
_AUTHORIZATIONS: Final = """CREATE TABLE mcp_authorizations (
        state_hash TEXT PRIMARY KEY,
        server TEXT NOT NULL,
        user_id TEXT NOT NULL,
        task_id TEXT NOT NULL REFERENCES tasks (task_id),
        channel TEXT NOT NULL,
        thread_ts TEXT NOT NULL,
        card_ts TEXT NOT NULL DEFAULT '',
        secret TEXT NOT NULL,
        created_at REAL NOT NULL,
        decision TEXT,
        decided_by TEXT,
        decided_at REAL,
        decision_id TEXT
    )"""
_INDEXES: Final = (
    "CREATE INDEX mcp_authorizations_open ON mcp_authorizations (created_at) WHERE decision IS NULL",
)
MCP_TOKENS_SQLITE: Final[tuple[str, ...]] = (
    _TOKENS + " WITHOUT ROWID",
    _AUTHORIZATIONS + " WITHOUT ROWID",
    *_INDEXES,
)
MCP_TOKENS_POSTGRES: Final[tuple[str, ...]] = (
    _TOKENS.replace(" REAL", " DOUBLE PRECISION"),
    _AUTHORIZATIONS.replace(" REAL", " DOUBLE PRECISION"),
    *_INDEXES,
)

GET_SECRET: Final = Statement(
    "SELECT secret, updated_at FROM mcp_tokens WHERE server = :server AND user_id = :user_id"
)
PUT_SECRET: Final = Statement(
    "INSERT INTO mcp_tokens (server, user_id, secret, updated_at) VALUES (:server, :user_id, :secret, :now)"
    " ON CONFLICT (server, user_id) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at"
)
DELETE_SECRET: Final = Statement(
    "DELETE FROM mcp_tokens WHERE server = :server AND user_id = :user_id RETURNING user_id"
)
#: The people connected to a server, most recently refreshed first (the client row left out).
CONNECTED: Final = Statement(
    "SELECT user_id FROM mcp_tokens WHERE server = :server AND user_id <> ''"
    " ORDER BY updated_at DESC LIMIT :limit"
)
OPEN_AUTHORIZATION: Final = Statement(
    "INSERT INTO mcp_authorizations (state_hash, server, user_id, task_id, channel, thread_ts, secret,"
    " created_at) VALUES (:state_hash, :server, :user_id, :task_id, :channel, :thread_ts, :secret, :now)"
)
GET_AUTHORIZATION: Final = Statement(
    "SELECT state_hash, server, user_id, task_id, channel, thread_ts, secret, created_at, decision"
    " FROM mcp_authorizations WHERE state_hash = :state_hash"
)
#: Open authorizations of one person on one server (a new request supersedes them).
OPEN_FOR: Final = Statement(
    "SELECT state_hash FROM mcp_authorizations WHERE server = :server AND user_id = :user_id"
    " AND task_id = :task_id AND decision IS NULL"
)
EXPIRED_AUTHORIZATIONS: Final = Statement(
    "SELECT state_hash FROM mcp_authorizations WHERE decision IS NULL AND created_at < :before"
    " ORDER BY created_at LIMIT :limit"
)
#: The first decision wins; that call alone appends ``:payload`` to the task's inbox (none when
#: ``payload`` is empty: a superseded request resumes nothing).
DECIDE_MCP_AUTHORIZATION: Final = decide_card(
    "decide_mcp_authorization", "mcp_authorizations", "state_hash", optional_payload=True
)
