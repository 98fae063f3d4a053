"""``/threadbound disconnect SERVER``: the person typing forgets their own tokens for a per-person MCP
server (``auth = "per_person"``); their next call through it asks them to connect again. The same
as ``python -m app mcp-disconnect SERVER USER``, for oneself only."""

from __future__ import annotations

from collections.abc import Sequence

from storage.base import Store

from .slash_command import Answer, CommandCall, Subcommand, private

SUMMARY = "forget your connection to a service that acts as you (`disconnect NAME`)"


def disconnect_subcommand(store: Store, servers: Sequence[str]) -> Subcommand:
    """The subcommand over the per-person servers named ``servers``."""
    known = ", ".join(f"`{s}`" for s in servers)

    async def disconnect(call: CommandCall) -> Answer:
        name = call.argument.split()[0].lower() if call.argument.split() else ""
        if name not in servers:
            return private(f"Say which service to disconnect: {known}.")
        if await store.mcp_tokens.delete(name, call.user):
            return private(f"Disconnected {name}: I can no longer act as you there until you connect again.")
        return private(f"You were not connected to {name}.")

    return disconnect
