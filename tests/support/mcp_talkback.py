"""An MCP server (fastmcp, over stdio) that talks back while its tools run, for the client-capability tests.

- ``export_rows`` reports progress at each of its steps;
- ``chatty`` sends log notifications, one carrying the value of ``$TALKBACK_SECRET``;
- ``report`` returns an embedded resource and a resource link to ``data://reports/summary.csv``;
- ``unlock`` makes the ``bonus`` tool visible for this session (``tools/list_changed``);
- ``summarize`` asks the client's model for a completion (``sampling/createMessage``);
- ``plan_release`` asks its user a form, ``open_dashboard`` a link (``elicitation/create``), both
  the 2026-07-28 way: an ``InputRequiredResult`` the client answers and retries with.
"""

from __future__ import annotations

import asyncio
import json
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
async def summarize(text: str, ctx: Context) -> object:
    """Summarize text with the client's model."""
    message = mcp_types.SamplingMessage(role="user", content=mcp_types.TextContent(type="text", text=text))
    params = mcp_types.CreateMessageRequestParams(messages=[message], max_tokens=5_000)
    asking = _asked(ctx, mcp_types.CreateMessageRequest(params=params))
    if asking is not None:
        return asking
    result = (ctx.input_responses or {})["q"]
    content = getattr(result, "content", None)
    return f"summary: {getattr(content, 'text', content)}"


RELEASE_FORM = {
    "type": "object",
    "properties": {
        "version": {"type": "string", "title": "Version", "description": "e.g. 2.1.0"},
        "replicas": {"type": "integer", "title": "Replicas"},
        "canary": {"type": "boolean", "title": "Canary first", "default": True},
        "region": {"type": "string", "title": "Region", "enum": ["eu", "us"]},
    },
    "required": ["version", "region"],
}


def _asked(ctx: Context, request: mcp_types.InputRequest) -> mcp_types.InputRequiredResult | None:
    return None if ctx.input_responses else mcp_types.InputRequiredResult(input_requests={"q": request})


@server.tool
async def plan_release(ctx: Context) -> object:
    """Plan a release: asks for the version, replicas, canary and region."""
    form = mcp_types.ElicitRequestFormParams(
        message="Which release do you want?", requested_schema=RELEASE_FORM
    )
    asking = _asked(ctx, mcp_types.ElicitRequest(params=form))
    if asking is not None:
        return asking
    answer = (ctx.input_responses or {})["q"]
    return json.dumps(
        {"action": getattr(answer, "action", None), "content": getattr(answer, "content", None)},
        sort_keys=True,
    )


@server.tool
async def open_dashboard(ctx: Context) -> object:
    """Ask the user to open the release dashboard."""
    link = mcp_types.ElicitRequestURLParams(
        message="Sign in to the dashboard", url="https://dash.example/login?s=1", elicitation_id="e1"
    )
    asking = _asked(ctx, mcp_types.ElicitRequest(params=link))
    if asking is not None:
        return asking
    return f"link: {getattr((ctx.input_responses or {})['q'], 'action', None)}"


if __name__ == "__main__":
    server.run(show_banner=False)
