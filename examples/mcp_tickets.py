"""A small ticket tracker as an MCP server over stdio: the one ``agent.example.toml`` runs.

It needs nothing beyond ``pip install -e .`` (the MCP SDK's own ``MCPServer`` comes with the base
install), so ``cp agent.example.toml agent.toml`` works as it is. The tickets live in the JSON file
``TICKETS_DB`` names (created on the first change), else in memory. Try it by hand with
``python examples/mcp_tickets.py`` (it speaks JSON-RPC on stdin and stdout) or through the app:
the agent sees ``tickets_search_tickets``, ``tickets_get_ticket`` and ``tickets_close_ticket``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

START = {
    "1": {"id": 1, "title": "Login page times out", "status": "open"},
    "2": {"id": 2, "title": "Export to CSV drops the header row", "status": "open"},
    "3": {"id": 3, "title": "Dark mode colours", "status": "closed"},
}

server = MCPServer("tickets", instructions="The team's ticket tracker.")
#: Tools that only read: no approval card by default (``approval_default`` in docs/agent-file.md).
READ_ONLY = ToolAnnotations(read_only_hint=True)
_db = Path(os.environ["TICKETS_DB"]) if os.environ.get("TICKETS_DB") else None
_memory: dict[str, dict[str, object]] = {}


def _tickets() -> dict[str, dict[str, object]]:
    if _db is not None and _db.is_file():
        return dict(json.loads(_db.read_text(encoding="utf-8")))
    return _memory or {k: dict(v) for k, v in START.items()}


def _save(tickets: dict[str, dict[str, object]]) -> None:
    if _db is None:
        _memory.update(tickets)
        return
    _db.parent.mkdir(parents=True, exist_ok=True)
    _db.write_text(json.dumps(tickets, indent=2), encoding="utf-8")


@server.tool(annotations=READ_ONLY)
def search_tickets(query: str) -> list[dict[str, object]]:
    """Search the ticket tracker by words in a ticket's title; returns matching tickets."""
    words = query.lower().split()
    return [t for t in _tickets().values() if any(w in str(t["title"]).lower() for w in words)]


@server.tool(annotations=READ_ONLY)
def get_ticket(ticket_id: int) -> dict[str, object]:
    """One ticket by its number: id, title and status (open or closed)."""
    ticket = _tickets().get(str(ticket_id))
    if ticket is None:
        raise ValueError(f"no ticket {ticket_id}")
    return ticket


@server.tool()
def close_ticket(ticket_id: int) -> dict[str, object]:
    """Close a ticket by its number; returns the ticket as it is now."""
    tickets = _tickets()
    ticket = tickets.get(str(ticket_id))
    if ticket is None:
        raise ValueError(f"no ticket {ticket_id}")
    ticket["status"] = "closed"
    _save(tickets)
    return ticket


if __name__ == "__main__":
    server.run()
