"""What the task reads when a person it asked to connect a per-person MCP server answered: the
inbox item an authorization's decision appends (``Store.mcp_tokens.decide_authorization``) and
the prompt row it becomes. Light on purpose (no MCP SDK): the prompt renders it on every run."""

from __future__ import annotations

import json
from typing import Any, Literal

#: ``kind`` of the inbox payload a decided authorization appends.
AUTHORIZATION_KIND = "mcp_authorization"
Outcome = Literal["connected", "declined", "expired", "failed"]

_EVENTS: dict[str, str] = {
    "connected": "{who} connected the {server} service: its tools now act as {who}. Carry on with what "
    "needed it.",
    "declined": "{who} declined to connect the {server} service: its tools cannot act for {who}.",
    "expired": "The link to connect the {server} service expired before {who} used it.",
    "failed": "Connecting the {server} service failed: the service did not give a token. {who} may try "
    "again by asking.",
}


def payload(server: str, user: str, outcome: Outcome) -> str:
    """The inbox payload of a decided authorization; ``user`` is whom the task resumes for."""
    return json.dumps({"kind": AUTHORIZATION_KIND, "server": server, "user": user, "status": outcome})


def is_authorization(raw: Any) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == AUTHORIZATION_KIND


def authorization_row(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """The prompt row of a decided authorization, ``name`` the person's display name."""
    server, status = str(raw.get("server") or ""), str(raw.get("status") or "")
    event = _EVENTS.get(status, _EVENTS["failed"]).format(who=name or "the person", server=server)
    return {"event": event, "service": server, "status": status}
