"""MCP servers from the agent file: start, list tools, call, restart, stop.

Every server is contained: one that does not start or answer within its
``startup_timeout`` makes its tools absent (``error`` says why) and nothing
else changes. A call that fails, raises or runs past ``timeout`` raises
:class:`McpCallFailed` with a short reason; a connection that broke (a stdio
server that died, an HTTP session that was lost) is reopened on the server's
next use, and a stdio server is checked with a ping before each call so one
that died between calls is restarted before the call, not after it failed.

What a server sees: a stdio server's environment is built from scratch — the
file's ``env`` (``${VAR}`` expanded) plus the MCP SDK's short safe list (HOME,
LOGNAME, PATH, SHELL, TERM, USER) and :data:`PASSED_THROUGH` — so the Slack
token and every other secret of this process stay out of it. An HTTP server
gets the file's ``headers`` and nothing else, only on its own origin
(:mod:`app.agent.mcp.http`).

What leaves a server is bounded: each answer while it is read (``http``, ``stdio_cap``), tool
descriptions and schemas (``bounds``). Reasons shown in logs, ``check`` and to the model never
carry the URL's query or password, nor any expanded ``${VAR}`` or header value.

fastmcp and the MCP SDK are imported when a server is first opened, not with this module: a
process whose agent file names no MCP server never loads them (they are about half of what
``import app.service`` costs; ``tests/test_lazy_imports.py`` keeps it so).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from app.agent.approval_policy import destructive_hint, read_only_hint
from app.agent.mcp.bounds import bounded_description, bounded_schema
from app.agent.mcp.config import McpConfigError, McpServerConfig
from app.agent.mcp.http import MAX_ANSWER_BYTES, client_factory
from app.agent.mcp.results import map_result
from app.agent.mcp.scope import CallScope, InFlight
from app.agent.mcp.stderr import StderrTail
from app.agent.mcp.stdio_cap import install as cap_stdio_answers
from app.agent.mcp.talkback import Sampler, message_handler, write_log
from app.logs import add_secrets
from channel.errors import bounded

if TYPE_CHECKING:
    from fastmcp.client.transports import ClientTransport
    from fastmcp.exceptions import McpError
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models import Model

    from app.agent.mcp.elicitation import Elicitor
    from app.agent.mcp.oauth import PersonalAccess
    from app.agent.mcp.personal import PersonalServer
    from app.agent.usage import Budgets

log = logging.getLogger(__name__)

#: Variables a stdio server inherits besides the SDK's own list: locale, time zone, temp dir. No secrets.
PASSED_THROUGH = ("LANG", "LC_ALL", "TZ", "TMPDIR")
# What model APIs accept as a tool name; an MCP tool whose prefixed name is not one is left out.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# How long a stdio liveness ping may take before the call goes ahead anyway (a busy server is not dead).
_PING_TIMEOUT = 5.0
# Bound on how long closing a session may take (a wedged server must not hold up shutdown).
_CLOSE_TIMEOUT = 10.0
# Bound on a reason shown in logs, `check` and tool results.
_REASON_BYTES = 300


class McpCallFailed(Exception):
    """A call that did not produce a result; the message says why, for the model."""


@dataclass(frozen=True, slots=True)
class McpTool:
    """One MCP tool as threadbound offers it: ``name`` is ``<server>_<tool>``."""

    name: str
    server: str
    #: The tool's name on its server.
    remote_name: str
    description: str
    #: The tool's input JSON schema, as the server gave it.
    schema: Mapping[str, Any]
    #: "active" when the server's ``eager`` globs select it, else "deferred" behind tool_search.
    starts: str
    #: Marked read-only by its server (``readOnlyHint``) or by the agent file's ``read_only``: such a
    #: call needs no approval unless ``approval`` names it (``app.agent.approval_policy``).
    read_only: bool = False
    #: Marked by its server as one that may destroy something (``destructiveHint``); shown in ``check``.
    destructive: bool = False

    @property
    def label(self) -> str:
        return f"{self.server}: {self.remote_name.replace('_', ' ')}"

    @property
    def short_name(self) -> str:
        return self.remote_name

    def parameter_text(self) -> str:
        """Parameter names and descriptions, for tool_search's scoring."""
        properties = self.schema.get("properties")
        if not isinstance(properties, dict):
            return ""
        return " ".join(
            f"{name} {prop.get('description', '') if isinstance(prop, dict) else ''}"
            for name, prop in properties.items()
        )


class McpServer:
    """One configured server and its connection; never raises from start or stop."""

    def __init__(self, config: McpServerConfig, environ: Mapping[str, str]) -> None:
        self.config = config
        # Expanded now, so a missing variable is a start-up error naming it (McpConfigError).
        self._resolved = config.resolve(environ)
        self._env, self._headers = self._resolved.env, self._resolved.headers
        add_secrets(self._resolved.secrets)
        cap_stdio_answers()
        self._passed = {k: environ[k] for k in PASSED_THROUGH if k in environ}
        self._toolset: MCPToolset[Any] | None = None
        self._broken = False
        # Set when an HTTP answer passed MAX_ANSWER_BYTES, so the failed call can say why.
        self._too_large = False
        self._reconnect = asyncio.Lock()
        #: The stdio server's stderr of its latest start (its last lines say why it stopped).
        self._stderr: StderrTail | None = None
        #: The tools it offers, once started; empty when it failed.
        self.tools: tuple[McpTool, ...] = ()
        #: Why the server's tools are absent (None once it started).
        self.error: str | None = "not started"
        #: How many tools the server listed, before include/exclude.
        self.listed = 0
        #: The calls in flight on the session: whose run a sampling request serves.
        self.inflight = InFlight()
        #: Answers sampling requests once :meth:`McpServers.attach` gave a model and ``sampling`` allows it.
        self.sampler: Sampler | None = None
        #: Asks the server's questions in the thread (``elicitation/create``), once attached.
        self.elicit: Callable[..., Any] | None = None
        #: Told when the server's tool list changed (``McpServers`` refreshes what is offered).
        self.on_change: Callable[[], None] | None = None
        # The re-listing a list_changed started: a call that caused it waits for it before returning.
        self._relisting: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (start the process for stdio) and list the tools; on failure record why."""
        try:
            toolset = await self._open()
            async with asyncio.timeout(self.config.startup_timeout):
                listed = await toolset.list_tools()
        except Exception as exc:
            await self._close()
            reason = reason_of(exc, self.config.startup_timeout, "start")
            self.error = self.redact(reason + await self._stderr_said())
            log.warning("MCP server %s is unavailable, its tools are absent: %s", self.name, self.error)
            return
        self.listed = len(listed)
        self.tools = tuple(self._offered(listed))
        self.error = None
        log.info(
            "MCP server %s (%s): %d tools, %d offered",
            self.name,
            self.config.transport,
            self.listed,
            len(self.tools),
        )

    async def stop(self) -> None:
        await self._close()
        if self._stderr is not None:
            self._stderr.close()

    async def _stderr_said(self) -> str:
        """``; its stderr ended with: …`` (the last lines a stdio server wrote), or ""."""
        if self._stderr is None:
            return ""
        lines = await self._stderr.last_lines()
        return f"; its stderr ended with: {' | '.join(lines)}" if lines else ""

    def _answer_dropped(self) -> None:
        self._too_large = True

    def redact(self, text: str) -> str:
        """``text`` without the server's secrets (URL query and password, expanded values)."""
        return self._resolved.redact(text)

    def _offered(self, listed: Sequence[Any]) -> list[McpTool]:
        return self.offered(self.config, listed)

    @staticmethod
    def offered(config: McpServerConfig, listed: Sequence[Any]) -> list[McpTool]:
        """The tools of ``listed`` (as the server listed them) that ``config`` offers, bounded."""
        tools = []
        server = config.name
        for tool in listed:
            if not config.selects(tool.name):
                continue
            name = f"{server}_{tool.name}"
            if not _TOOL_NAME.match(name):
                log.warning(
                    "MCP server %s: tool %r left out, %r is not a valid tool name", server, tool.name, name
                )
                continue
            raw_schema = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
            schema = bounded_schema(server, tool.name, raw_schema)
            if schema is None:
                continue
            description = (tool.description or tool.title or tool.name).strip()
            tools.append(
                McpTool(
                    name=name,
                    server=server,
                    remote_name=tool.name,
                    description=bounded_description(server, tool.name, description),
                    schema=schema,
                    starts="active" if config.is_eager(tool.name) else "deferred",
                    read_only=read_only_hint(tool) or config.declares_read_only(tool.name),
                    destructive=destructive_hint(tool),
                )
            )
        return tools

    def _transport(self, stderr: StderrTail | None) -> ClientTransport:
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

        if self.config.command:
            program, *args = self.config.command
            return StdioTransport(
                # "python" is the Python that runs threadbound: its packages, activated or not.
                command=sys.executable if program in ("python", "python3") else program,
                args=list(args),
                # The SDK merges this over its own safe list; nothing else of os.environ is passed.
                env={**self._passed, **self._env},
                cwd=str(self.config.cwd) if self.config.cwd else None,
                # Exiting the client ends the process: stop and restart really stop it.
                keep_alive=False,
                log_file=stderr.writer if stderr is not None else None,
            )
        url = self._resolved.url
        return StreamableHttpTransport(
            url,
            headers=self._headers or None,
            httpx_client_factory=client_factory(url, self._headers, on_too_large=self._answer_dropped),
            max_sse_event_size=MAX_ANSWER_BYTES,
        )

    async def _open(self) -> MCPToolset[Any]:
        from fastmcp.client import Client
        from pydantic_ai.mcp import MCPToolset

        if self._stderr is not None:
            self._stderr.close()
        self._stderr = await StderrTail.open(self.name) if self.config.command else None
        client: Client[Any] = Client(
            self._transport(self._stderr),
            name="threadbound",
            init_timeout=self.config.startup_timeout,
            log_handler=partial(write_log, self.name),
            message_handler=message_handler(self._tools_changed),
            # Declared only where the agent file allows it: a server then may ask for a completion.
            sampling_handler=self.sampler,
            elicitation_handler=self.elicit,
        )
        toolset: MCPToolset[Any] = MCPToolset(client, id=self.name, tool_error_behavior="error")
        try:
            async with asyncio.timeout(self.config.startup_timeout):
                await toolset.__aenter__()
        finally:
            if self._stderr is not None:
                self._stderr.started()  # the child has its copy: the pipe ends with it
        self._toolset = toolset
        self._broken = False
        return toolset

    async def _close(self) -> None:
        toolset, self._toolset = self._toolset, None
        if toolset is None or not toolset.is_running:
            return
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await toolset.__aexit__(None, None, None)
        except Exception as exc:
            # Usual for a session that already broke (the HTTP server is gone); nothing is left open.
            reason = self.redact(reason_of(exc, _CLOSE_TIMEOUT, "close"))
            log.info("closing MCP server %s: %s", self.name, reason)

    async def _tools_changed(self) -> None:
        """``notifications/tools/list_changed``: list again, off the session's receive loop."""
        task = self._relisting = asyncio.get_running_loop().create_task(self._relist())
        _RELISTS.add(task)
        task.add_done_callback(_RELISTS.discard)

    async def _relist(self) -> None:
        toolset = self._toolset
        if toolset is None or not toolset.is_running:
            return
        try:
            async with asyncio.timeout(self.config.startup_timeout):
                listed = await toolset.client.list_tools()
        except Exception as exc:
            reason = self.redact(reason_of(exc, self.config.startup_timeout, "list tools"))
            log.warning("MCP server %s: its changed tool list could not be read: %s", self.name, reason)
            return
        self.listed = len(listed)
        self.tools = tuple(self._offered(listed))
        log.info(
            "MCP server %s changed its tools: %d listed, %d offered", self.name, self.listed, len(self.tools)
        )
        if self.on_change is not None:
            self.on_change()

    async def _relisted(self) -> None:
        """Wait for a re-listing in progress, so the step after the call that changed the tools
        already offers the new list."""
        await asyncio.sleep(0)  # a notification sent just before the result is dispatched first
        task = self._relisting
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=self.config.startup_timeout)

    async def _read(self, uri: str) -> list[Any]:
        """A resource of this server (a result's resource link), bounded in time like a call."""
        toolset = await self._ready()
        async with asyncio.timeout(self.config.timeout):
            return list(await toolset.client.read_resource(uri))

    # -- calls --------------------------------------------------------------------------
    async def call(self, tool: McpTool, args: dict[str, Any], scope: CallScope | None = None) -> Any:
        """Call ``tool`` for ``scope``'s run; its result mapped for the model (text, JSON,
        ``BinaryContent``, :class:`~app.agent.mcp.results.ResourceFile` or a list of them)."""
        from fastmcp.exceptions import McpError, ToolError

        toolset = await self._ready()
        self._too_large = False
        try:
            with self.inflight.calling(scope):
                async with asyncio.timeout(self.config.timeout):
                    result = await toolset.client.call_tool_mcp(
                        tool.remote_name, args, progress_handler=scope.progress if scope is not None else None
                    )
            if result.is_error:
                raise ToolError(_error_text(result))
            await self._relisted()
            return await map_result(result, self._read)
        except ToolError as exc:
            raise McpCallFailed(bounded(self.redact(f"{tool.name} failed: {exc}"), _REASON_BYTES)) from exc
        except TimeoutError as exc:
            raise McpCallFailed(f"{tool.name} did not answer within {self.config.timeout:g} s") from exc
        except McpError as exc:
            if _connection_lost(exc):
                self._broken = True
            if self._too_large:
                raise McpCallFailed(
                    f"{tool.name} failed: the server's answer was larger than "
                    f"{MAX_ANSWER_BYTES // 2**20} MiB; it was not read"
                ) from exc
            raise McpCallFailed(bounded(self.redact(f"{tool.name} failed: {exc}"), _REASON_BYTES)) from exc
        except Exception as exc:
            # Transport and protocol failures: the session may be unusable, so reopen it next time.
            self._broken = True
            log.warning("MCP call %s failed", tool.name, exc_info=True)
            raise McpCallFailed(self.redact(reason_of(exc, self.config.timeout, "call"))) from exc

    async def _ready(self) -> MCPToolset[Any]:
        """The open toolset, reopened first when the last call broke it or a stdio server died."""
        from fastmcp.exceptions import McpError

        toolset = self._toolset
        if toolset is not None and not self._broken and self.config.command:
            try:
                async with asyncio.timeout(_PING_TIMEOUT):
                    await toolset.client.ping()
            except TimeoutError:
                pass  # busy, perhaps with another long call; let the call's own timeout decide
            except McpError as exc:
                # Any answer, even "Method not found" (FastMCP 4 servers have no ping), means it lives.
                self._broken = _connection_lost(exc)
            except Exception:
                self._broken = True
        if toolset is not None and not self._broken:
            return toolset
        async with self._reconnect:
            if self._toolset is not None and not self._broken:
                return self._toolset  # another call reopened it while this one waited
            log.warning("MCP server %s: reconnecting (the previous session was lost)", self.name)
            await self._close()
            try:
                return await self._open()
            except Exception as exc:
                await self._close()
                self._broken = True
                reason = reason_of(exc, self.config.startup_timeout, "restart") + await self._stderr_said()
                reason = self.redact(reason)
                log.warning("MCP server %s could not be restarted: %s", self.name, reason)
                raise McpCallFailed(f"the {self.name} server is unavailable: {reason}") from exc


class McpServers:
    """Every server of the agent file; started together, each on its own."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        environ: Mapping[str, str] | None = None,
        per_person: Callable[[McpServerConfig, Mapping[str, str]], PersonalServer] | None = None,
    ) -> None:
        """``per_person`` builds the servers with ``auth = "per_person"`` (``PersonalServer``; the
        composition root passes it); without it such a server is a :class:`McpConfigError`."""
        env = os.environ if environ is None else environ
        self.servers: list[McpServer | PersonalServer] = []
        for config in configs:
            if not config.per_person:
                self.servers.append(McpServer(config, env))
                continue
            if per_person is None:
                raise McpConfigError(f"{config.where or config.name}: per-person servers are not served here")
            self.servers.append(per_person(config, env))
        self._by_tool: dict[str, tuple[McpServer | PersonalServer, McpTool]] = {}
        #: Told when a server's tools changed after start-up (the service narrows and offers them).
        self.on_change: Callable[[], None] | None = None
        #: Asks the servers' questions (the service routes the forms' clicks to it).
        self.elicitor: Elicitor | None = None
        #: What per-person servers share (``app.agent.mcp.personal_wiring.attach``); None without them.
        self.access: PersonalAccess | None = None
        for server in self.servers:
            server.on_change = self._changed

    @property
    def personal(self) -> list[PersonalServer]:
        """The servers that act as each person (``auth = "per_person"``)."""
        return [s for s in self.servers if s.config.per_person]  # type: ignore[misc]

    def attach(self, model: Model, budgets: Budgets | None = None, elicitor: Elicitor | None = None) -> None:
        """Before :meth:`start`: the model that answers the sampling requests of servers whose
        ``sampling`` allows them, the budgets that bound them, and who asks the servers' questions.
        (Per-person servers take neither yet: each call's session is their own.)"""
        for server in self.servers:
            if not isinstance(server, McpServer):
                continue
            if elicitor is not None:
                server.elicit = elicitor.handler(server.name, server.inflight)
            if server.config.sampling:
                server.sampler = Sampler(
                    server.name, server.inflight, model, server.config.sampling_max_tokens, budgets
                )

    def _changed(self) -> None:
        self._by_tool = {t.name: (s, t) for s in self.servers for t in s.tools}
        if self.on_change is not None:
            self.on_change()

    def __bool__(self) -> bool:
        return bool(self.servers)

    async def start(self) -> None:
        await asyncio.gather(*(s.start() for s in self.servers))
        self._by_tool = {t.name: (s, t) for s in self.servers for t in s.tools}

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.servers))

    @property
    def tools(self) -> tuple[McpTool, ...]:
        """The tools of every server that started, in file order."""
        return tuple(t for _, t in self._by_tool.values())

    def lookup(self, name: str) -> tuple[McpServer | PersonalServer, McpTool] | None:
        return self._by_tool.get(name)

    def unavailable(self) -> dict[str, str]:
        """Servers whose tools are absent, with the reason."""
        return {s.name: s.error for s in self.servers if s.error is not None}


# Re-listings in flight (a task is only weakly held by the loop).
_RELISTS: set[asyncio.Task[None]] = set()


def _error_text(result: Any) -> str:
    """What a result marked ``isError`` says (its text parts), bounded."""
    texts = [getattr(part, "text", "") for part in result.content]
    return bounded(" ".join(t for t in texts if t) or "the tool reported an error", _REASON_BYTES)


def _connection_lost(exc: McpError) -> bool:
    # The SDK reports a dead peer as JSON-RPC error -32000 "Connection closed".
    error = getattr(exc, "error", None)
    code = getattr(error, "code", getattr(exc, "code", None))
    return code == -32000 or "connection closed" in str(exc).lower()


def reason_of(exc: BaseException, timeout: float, what: str) -> str:
    """A short, single-line reason for logs, `check` and the model."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s ({what})"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {' '.join(str(cause).split())}"
    return bounded(f"{type(exc).__name__}: {text}", _REASON_BYTES)


__all__ = ["McpCallFailed", "McpServer", "McpServers", "McpTool", "reason_of"]
