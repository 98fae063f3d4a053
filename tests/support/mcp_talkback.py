"""An MCP server (fastmcp, over stdio) that talks back while its tools run, for the client-capability tests.

- ``export_rows`` reports progress at each of its steps;
- ``chatty`` sends log notifications, one carrying the value of ``$TALKBACK_SECRET``;
- ``report`` returns an embedded resource and a resource link to ``data://reports/summary.csv``;
- ``unlock`` makes the ``bonus`` tool visible for this session (``tools/list_changed``);
- ``summarize`` asks the client's model for a completion (``sampling/createMessage``).
"""

from __future__ import annotations

import asyncio
import os

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.tools import ToolResult

server = FastMCP("talkback")

SUMMARY_CSV = "name,total\nalpha,3\nbeta,5\n"


@server.tool
async def export_rows(steps: int, ctx: Context) -> str:
    """Export rows in several steps, reporting progress after each."""
    for step in range(1, steps + 1):
        await asyncio.sleep(0.05)
        await ctx.report_progress(step, steps, f"step {step} of the export")
    return f"exported {steps} steps"


@server.tool
async def chatty(ctx: Context) -> str:
    """Log a few lines to the client, one with the server's secret in it."""
    await ctx.info("starting the chatty tool")
    await ctx.warning(f"connecting with key {os.environ.get('TALKBACK_SECRET', '')}")
    return "chatted"


@server.resource("data://reports/summary.csv", mime_type="text/csv")
def summary() -> str:
    return SUMMARY_CSV


@server.tool
async def report() -> ToolResult:
    """A report: an embedded resource and a link to another."""
    embedded = mcp_types.EmbeddedResource(
        type="resource",
        resource=mcp_types.TextResourceContents(
            uri="data://reports/notes.md", mime_type="text/markdown", text="# Notes\nAll good.\n"
        ),
    )
    link = mcp_types.ResourceLink(
        type="resource_link", uri="data://reports/summary.csv", name="summary.csv", mime_type="text/csv"
    )
    return ToolResult(
        content=[mcp_types.TextContent(type="text", text="Here is the report."), embedded, link]
    )


@server.tool(tags={"bonus"})
def bonus() -> str:
    """A bonus tool, hidden until unlock is called."""
    return "bonus!"


server.disable(tags={"bonus"})


@server.tool
async def unlock(ctx: Context) -> str:
    """Unlock the bonus tool for this session."""
    await ctx.enable_components(tags={"bonus"})
    return "unlocked"


@server.tool
async def summarize(text: str, ctx: Context) -> str:
    """Summarize text with the client's model."""
    result = await ctx.session.create_message(
        [mcp_types.SamplingMessage(role="user", content=mcp_types.TextContent(type="text", text=text))],
        max_tokens=5_000,
        related_request_id=ctx.request_id,
    )
    content = result.content
    return f"summary: {getattr(content, 'text', content)}"


if __name__ == "__main__":
    server.run(show_banner=False)
