"""MCP tools as one pydantic-ai toolset: offered per session, calls contained, results made readable.

At each step the toolset lists the MCP tools the run's session offers now (its
``eager`` tools, and the deferred ones ``tool_search`` enabled), so like the
channel toolset it follows the session. A call never raises to the agent: a
failure, an exception or a timeout becomes ``{"error": {"code": "tool_failed",
...}}``. What a tool returns is turned into something every model can read:
text and JSON stay as they are, and an image, audio clip or file is saved into
the task's directory (``files/``) and named in the result, so ``channel_attach``
can post it. Being an ordinary toolset, it can be wrapped like any other (for
example with ``approval_required``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import mimetypes
import re
from functools import partial
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import BinaryContent
from pydantic_ai.toolsets.abstract import ToolsetTool

from app.agent.mcp.oauth import AuthorizationRequested
from app.agent.mcp.personal import requested_result
from app.agent.mcp.results import ResourceFile
from app.agent.mcp.scope import CallScope, ShowProgress
from app.agent.mcp.servers import McpCallFailed, McpServers
from app.agent.runtime import ObservedToolset, RunDeps, ToolFinished, ToolStarted
from channel import task_files
from channel.errors import ChannelError, bounded
from channel.file_quota import FileQuota

#: Characters of a result the model reads; longer results are cut with a note saying so.
MAX_RESULT_CHARS = 50_000
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def tool_failed(message: str) -> dict[str, Any]:
    return {"error": {"code": "tool_failed", "message": bounded(message)}}


class McpToolset(ObservedToolset):
    """The MCP tools the run's session offers now, from every server that started."""

    # A call that raised did not produce a result: the model hears tool_failed.
    _crash_outcome = "tool_failed"

    def __init__(
        self,
        servers: McpServers,
        on_start: ToolStarted | None = None,
        on_end: ToolFinished | None = None,
        on_progress: ShowProgress | None = None,
    ) -> None:
        super().__init__(on_start, on_end)
        self._servers = servers
        self._on_progress = on_progress

    @property
    def id(self) -> str | None:
        return "mcp"

    async def get_tools(self, ctx: RunContext[RunDeps]) -> dict[str, ToolsetTool[RunDeps]]:
        offered = {t.name for t in ctx.deps.session.active_host_tools()}
        # The server validates arguments; its refusal comes back as tool_failed, never a retry.
        return {
            t.name: self._tool(t.name, t.description, partial(dict, t.schema))
            for t in self._servers.tools
            if t.name in offered
        }

    async def _call(self, name: str, tool_args: dict[str, Any], ctx: RunContext[RunDeps]) -> tuple[Any, str]:
        session = ctx.deps.session
        if all(t.name != name for t in session.tools.host_tools):
            # Scoped by profile: a tool this conversation's profile leaves out is never run, even
            # when a call names it (a model that remembers it from elsewhere, a replayed transcript).
            message = f"There is no tool {name!r} in this conversation."
            return {"error": {"code": "denied", "message": message}}, "denied"
        found = self._servers.lookup(name)
        if found is None:
            return tool_failed(f"There is no MCP tool {name!r}."), "tool_failed"
        server, mcp_tool = found
        scope = CallScope(
            session=session,
            tool=name,
            label=mcp_tool.label,
            call_id=ctx.tool_call_id or "",
            usage=ctx.deps.usage,
            show=self._on_progress,
        )
        try:
            value = await server.call(mcp_tool, tool_args, scope)
        except McpCallFailed as exc:
            return tool_failed(str(exc)), "tool_failed"
        except AuthorizationRequested:
            # The person got a private link; the turn waits for them as for an ask (app.agent.mcp.personal).
            session.turn_end = session.turn_end or "waiting"
            return requested_result(mcp_tool.server), "ok"  # asking someone is no failure, as channel_ask
        shown = await readable(
            value,
            session.task_dir,
            name,
            max_bytes=session.files_max_bytes,
            quota=session.file_quota,
            person=session.requester,
        )
        return shown, "ok"


async def readable(
    value: Any,
    task_dir: Path,
    tool_name: str,
    *,
    max_bytes: int = task_files.DEFAULT_MAX_BYTES,
    quota: FileQuota | None = None,
    person: str = "",
) -> Any:
    """``value`` (as pydantic-ai maps an MCP result) with binary parts saved as files and named;
    a part that would pass a file quota (the task's ``max_bytes``, or ``quota``'s caps for
    ``person`` and the install) is not saved, and says so."""
    saved: list[str] = []
    quota = quota or FileQuota()

    async def convert(item: Any) -> Any:
        if isinstance(item, BinaryContent | ResourceFile):
            size, what = len(item.data), f"a {item.media_type} result"
            try:
                async with quota.reserve(task_dir, size, task_max=max_bytes, person=person, what=what):
                    path = await _save(item, task_dir, tool_name)
                    if person:
                        entry = {"path": path, "size": size, "by": person}
                        await asyncio.to_thread(task_files.remember, task_dir, f"saved|{path}", entry)
            except ChannelError as exc:
                return exc.as_result()
            saved.append(path)
            shown = {"file": path, "media_type": item.media_type, "size": size}
            return {**shown, "uri": item.uri} if isinstance(item, ResourceFile) else shown
        if isinstance(item, list):
            return [await convert(x) for x in item]
        return item

    result = await convert(value)
    if saved:
        result = {
            "content": result,
            "note": "Saved in your task directory: " + ", ".join(saved) + ". Share one with channel_attach.",
        }
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    if len(text) > MAX_RESULT_CHARS:
        return text[:MAX_RESULT_CHARS] + f"\n[cut: the result had {len(text)} characters]"
    return result


async def _save(content: BinaryContent | ResourceFile, task_dir: Path, tool_name: str) -> str:
    """Write ``content`` under ``task_dir/files/``; returns its path relative to ``task_dir``."""
    extension = mimetypes.guess_extension(content.media_type.split(";")[0].strip()) or ".bin"
    # Named by the content's hash: the same content twice is one file, two different ones never collide.
    digest = hashlib.sha256(content.data).hexdigest()[:10]
    if isinstance(content, ResourceFile):
        stem, dot, ext = content.name.rpartition(".")
        base, extension = (stem, dot + ext) if dot and stem else (content.name, extension)
        name = _SAFE.sub("_", f"{tool_name}-{digest}-{base}")[:120] + _SAFE.sub("_", extension)[:12]
    else:
        name = _SAFE.sub("_", f"{tool_name}-{content.identifier}")[:120] + extension
    relative = Path("files") / name

    def write() -> None:
        path = task_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            tmp = path.with_suffix(path.suffix + ".part")
            tmp.write_bytes(content.data)
            tmp.replace(path)

    await asyncio.to_thread(write)
    return str(relative)
