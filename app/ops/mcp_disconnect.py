"""``python -m app mcp-disconnect SERVER USER``: forget one person's tokens for a per-person MCP
server. Their next call through it asks them to connect again. The server's own grant is not
revoked (that is the person's, at the service); the tokens are deleted from the store, so this app
can no longer act as them there. Needs only the database (no ``MCP_TOKEN_KEY``: nothing is read).

:func:`disconnect` is what a Slack surface (a slash command, App Home) calls for the clicking person.
"""

from __future__ import annotations

import sys
from typing import TextIO

from app.settings import Settings
from storage.base import Store

from .reports import read_store


async def disconnect(store: Store, server: str, user: str) -> bool:
    """Forget ``user``'s tokens for ``server``; whether there were any."""
    return await store.mcp_tokens.delete(server, user)


async def mcp_disconnect_command(
    settings: Settings, server: str, user: str, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    forgot = await read_store(settings, lambda store: disconnect(store, server, user), err)
    if forgot is None:
        return 2
    said = f"disconnected {user} from {server}" if forgot else f"{user} was not connected to {server}"
    print(f"threadbound: {said}", file=out)
    return 0
