"""A small ticket-tracker MCP server built with fastmcp, for tests and the README's example.

Run it over stdio (``python tests/support/mcp_tickets.py``) or Streamable HTTP
(``python tests/support/mcp_tickets.py --http PORT``, served at ``/mcp`` on 127.0.0.1).
Besides its ticket tools it has a few tools tests use to make trouble on purpose or
to look inside: ``hang`` never answers, ``exit_server`` kills the process,
``environment`` and ``request_headers`` report what the server was given.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import zlib

from fastmcp import FastMCP
from fastmcp.server.dependencies import get_http_headers
from fastmcp.tools import ToolResult
from mcp import types
from mcp.types import ToolAnnotations

TICKETS = {
    1: {"id": 1, "title": "Login page times out", "status": "open"},
    2: {"id": 2, "title": "Export to CSV drops the header row", "status": "open"},
    3: {"id": 3, "title": "Dark mode colours", "status": "closed"},
}

#: Tools that only read are marked so: calls of the others wait for approval unless an agent file
#: says ``approval_default = "listed_only"`` (tests of calls that must run at once use that).
READ_ONLY = ToolAnnotations(read_only_hint=True)

server = FastMCP(
    "tickets",
    instructions="The team's ticket tracker.",
)


@server.tool(annotations=READ_ONLY)
def search_tickets(query: str) -> list[dict[str, object]]:
    """Search the ticket tracker by words in a ticket's title; returns matching tickets."""
    words = query.lower().split()
    return [t for t in TICKETS.values() if any(w in str(t["title"]).lower() for w in words)]


@server.tool(annotations=READ_ONLY)
def get_ticket(ticket_id: int) -> dict[str, object]:
    """Read one ticket by its number."""
    ticket = TICKETS.get(ticket_id)
    if ticket is None:
        raise ValueError(f"no ticket #{ticket_id}")
    return ticket


@server.tool(annotations=ToolAnnotations(destructive_hint=True))  # it may lose work: said so
def close_ticket(ticket_id: int) -> str:
    """Close a ticket by its number."""
    if ticket_id not in TICKETS:
        raise ValueError(f"no ticket #{ticket_id}")
    TICKETS[ticket_id]["status"] = "closed"
    return f"ticket #{ticket_id} closed"


@server.tool(annotations=READ_ONLY)
def ticket_chart() -> ToolResult:
    """A chart of open and closed tickets, as a PNG image."""
    return ToolResult(
        content=[
            types.TextContent(type="text", text="Tickets by status"),
            types.ImageContent(type="image", data=base64.b64encode(_png()).decode(), mime_type="image/png"),
        ]
    )


@server.tool(annotations=READ_ONLY)
async def hang() -> str:
    """Never answers (tests use it for call timeouts)."""
    await asyncio.Event().wait()
    return "unreachable"


@server.tool
def exit_server() -> str:
    """Ends this server process at once, as a crash would."""
    os._exit(3)


@server.tool
def notify(body: str, to: str, meta: dict[str, str] | None = None) -> str:
    """Send a note about a ticket to someone (tests gate it: the card must show ``to``)."""
    return f"sent to {to} ({len(body)} characters, {len(meta or {})} meta keys)"


@server.tool(annotations=READ_ONLY)
def big(mib: int) -> str:
    """A text result of ``mib`` MiB on one line (tests of the answer size cap)."""
    return "x" * (mib * 2**20)


@server.tool(annotations=READ_ONLY)
def environment() -> dict[str, object]:
    """The names of the environment variables this process sees, and TICKETS_DB's value."""
    return {"names": sorted(os.environ), "TICKETS_DB": os.environ.get("TICKETS_DB")}


@server.tool(annotations=READ_ONLY)
def request_headers() -> dict[str, str]:
    """The HTTP request headers of this call (empty over stdio)."""
    return get_http_headers(include_all=True)


@server.tool(annotations=READ_ONLY)
def whoami() -> dict[str, object]:
    """This server process's id (tests use it to see a restart)."""
    return {"pid": os.getpid()}


def _png() -> bytes:
    """A 1x1 white PNG, built by hand so the server needs no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = (1).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    pixels = zlib.compress(b"\x00\xff\xff\xff")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    args = parser.parse_args()
    if args.http:
        server.run(transport="http", host="127.0.0.1", port=args.http, show_banner=False)
    else:
        server.run(show_banner=False)


if __name__ == "__main__":
    main()
