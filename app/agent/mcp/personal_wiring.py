"""How the composition root (``app/service.py``) sets up per-person MCP servers: the start-up check
(``MCP_TOKEN_KEY``, ``PUBLIC_URL``), the :class:`~app.agent.mcp.oauth.PersonalAccess` the servers
share, and the ``GET /oauth/callback`` handler. (The tools a server lists once someone connected
reach the selection as any server's changed list does: ``McpServers.on_change``.)"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from app.agent.mcp.oauth import PersonalAccess
from app.agent.mcp.servers import McpServers
from app.settings import Settings
from storage.base import Store

#: Shows a person a private note (``ChannelAdapter.tell_privately``).
Tell = Callable[..., Awaitable[None]]


def startup_problem(servers: McpServers, settings: Settings) -> str | None:
    """Why per-person servers cannot start with these settings, naming the fix; None when they can."""
    personal = [s.name for s in servers.personal]
    if not personal:
        return None
    from app.agent.mcp.vault import TokenVault, VaultKeyError  # its cipher only when a server needs it

    named = ", ".join(personal)
    key = settings.mcp_token_key.get_secret_value()
    if not key:
        return (
            f'MCP server(s) {named} act per person (auth = "per_person"), and their tokens are kept '
            "encrypted: set MCP_TOKEN_KEY to a Fernet key (see docs/configuration.md)"
        )
    try:
        TokenVault(key)
    except VaultKeyError as exc:
        return str(exc)
    parts = urlsplit(settings.public_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return (
            f"MCP server(s) {named} act per person: set PUBLIC_URL to this app's public base URL "
            "(people are sent back to $PUBLIC_URL/oauth/callback)"
        )
    return None


def attach(servers: McpServers, settings: Settings, store: Store, tell: Tell) -> PersonalAccess | None:
    """The access every per-person server shares (set on each before they start), or None."""
    personal = servers.personal
    if not personal:
        return None
    from app.agent.mcp.vault import TokenVault

    async def offer(channel: str, user: str, text: str, thread_ts: str) -> None:
        await tell(channel, user, text, thread_ts=thread_ts)

    access = PersonalAccess(
        store.mcp_tokens,
        TokenVault(settings.mcp_token_key.get_secret_value()),
        settings.public_url,
        offer,
        ttl=settings.approval_ttl,
    )
    by_name = {s.name: s for s in personal}

    async def connected(server: str, user: str) -> bool:
        found = by_name.get(server)
        return await found.list_as(user) if found is not None else False

    access.on_connected = connected
    for server in personal:
        server.access = access
    return access


def callback_route(access: PersonalAccess) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``GET /oauth/callback``: a small page saying what happened; the person goes back to Slack."""

    async def callback(request: web.Request) -> web.Response:
        status, text = await access.complete(dict(request.query))
        body = (
            "<!doctype html><meta charset=utf-8><title>threadbound</title>"
            f"<p style='font-family:sans-serif'>{html.escape(text)}</p>"
        )
        return web.Response(
            status=status, text=body, content_type="text/html", headers={"Cache-Control": "no-store"}
        )

    return callback
