"""The statement group of per-person MCP credentials (``mcp_token_statements.py``), over one
:class:`~storage.sqlcore.Database`. The store reaches it as ``Store.mcp_tokens``; everything it
keeps is ciphertext made by the caller (``app/agent/mcp/vault.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from . import mcp_token_statements as sql
from .sqlcore import Database, decide


@dataclass(frozen=True, slots=True)
class McpAuthorization:
    """An authorization a person was asked for (``mcp_authorizations``)."""

    state_hash: str
    server: str
    user_id: str
    task_id: str
    channel: str
    thread_ts: str
    #: Ciphertext of what the token exchange needs (the PKCE verifier, the token endpoint, …).
    secret: str
    created_at: float
    #: None while open; ``connected``, ``declined`` or ``expired`` once decided.
    decision: str | None


class McpTokens:
    """Per-person tokens, registered clients and open authorizations of per-person MCP servers.
    ``user_id = ''`` is the server's registered client."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, server: str, user_id: str) -> str | None:
        """The ciphertext kept for ``(server, user_id)``, or None."""
        row = await self._db.one(sql.GET_SECRET, server=server, user_id=user_id)
        return None if row is None else str(row["secret"])

    async def put(self, server: str, user_id: str, secret: str, *, now: float) -> None:
        """Keep ``secret`` (ciphertext) for ``(server, user_id)``, replacing what was kept."""
        params = {"server": server, "user_id": user_id, "secret": secret, "now": now}
        await self._db.execute(sql.PUT_SECRET, params)

    async def delete(self, server: str, user_id: str) -> bool:
        """Forget ``(server, user_id)``; whether anything was kept."""
        return bool(await self._db.fetch(sql.DELETE_SECRET, {"server": server, "user_id": user_id}))

    async def connected(self, server: str, *, limit: int = 10) -> list[str]:
        """People with tokens for ``server``, most recently stored first."""
        rows = await self._db.fetch(sql.CONNECTED, {"server": server, "limit": limit})
        return [str(r["user_id"]) for r in rows]

    async def open_authorization(self, record: McpAuthorization) -> None:
        params = {
            "state_hash": record.state_hash,
            "server": record.server,
            "user_id": record.user_id,
            "task_id": record.task_id,
            "channel": record.channel,
            "thread_ts": record.thread_ts,
            "secret": record.secret,
            "now": record.created_at,
        }
        await self._db.execute(sql.OPEN_AUTHORIZATION, params)

    async def get_authorization(self, state_hash: str) -> McpAuthorization | None:
        row = await self._db.one(sql.GET_AUTHORIZATION, state_hash=state_hash)
        if row is None:
            return None
        return McpAuthorization(
            state_hash=str(row["state_hash"]),
            server=str(row["server"]),
            user_id=str(row["user_id"]),
            task_id=str(row["task_id"]),
            channel=str(row["channel"]),
            thread_ts=str(row["thread_ts"]),
            secret=str(row["secret"]),
            created_at=float(row["created_at"]),
            decision=None if row["decision"] is None else str(row["decision"]),
        )

    async def open_for(self, server: str, user_id: str, task_id: str) -> list[str]:
        """State hashes of the person's open authorizations of ``server`` in ``task_id``."""
        params = {"server": server, "user_id": user_id, "task_id": task_id}
        return [str(r["state_hash"]) for r in await self._db.fetch(sql.OPEN_FOR, params)]

    async def expired_authorizations(self, *, before: float, limit: int = 100) -> list[str]:
        rows = await self._db.fetch(sql.EXPIRED_AUTHORIZATIONS, {"before": before, "limit": limit})
        return [str(r["state_hash"]) for r in rows]

    async def decide_authorization(
        self, state_hash: str, *, decision: str, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide once (the first call wins, across instances) and append ``payload`` (unless empty) to
        the task's inbox in the same transaction; True for the call whose decision won."""
        return await decide(
            self._db,
            sql.DECIDE_MCP_AUTHORIZATION,
            state_hash=state_hash,
            decision=decision,
            user_id=user_id,
            now=now,
            payload=payload,
        )
