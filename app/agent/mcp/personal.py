"""A Streamable HTTP MCP server that acts as each person (``auth = "per_person"``): every call opens
a session carrying the token of the person whose message led to it (``app.agent.mcp.oauth``).

- **Its tools** are those the server lists to a connected person: at start-up the most recently
  connected people are tried in turn. Until someone has connected, the server offers one tool,
  ``NAME_connect``, which asks the requester to connect; once someone has, the server's tools are
  listed with their token and offered from the next step on (:attr:`on_change`).
- **A call** for a person without a usable token (none yet, refused, or its refresh failed) does not
  reach the server: the person gets a private link, the model reads ``{"status":
  "authorization_requested", …}`` and the turn ends waiting (``AuthorizationRequested``).
- A session is opened per call and closed after it: a token is never shared between people, and a
  revoked one is not kept alive in a pooled session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from app.agent.mcp.config import McpServerConfig
from app.agent.mcp.http import MAX_ANSWER_BYTES, client_factory
from app.agent.mcp.oauth import AuthorizationRequested, Person, PersonalAccess, ServerAuth, provider
from app.agent.mcp.scope import CallScope
from app.agent.mcp.servers import McpCallFailed, McpServer, McpTool, reason_of
from app.logs import add_secrets
from channel.errors import bounded

if TYPE_CHECKING:
    from pydantic_ai.mcp import MCPToolset

log = logging.getLogger(__name__)

#: People tried, most recent first, when listing the tools at start-up.
_LISTERS = 3
CONNECT = "connect"


class PersonalServer:
    """One per-person server (module doc); the same face as :class:`McpServer` to the toolset."""

    def __init__(self, config: McpServerConfig, environ: Mapping[str, str]) -> None:
        self.config = config
        self._resolved = config.resolve(environ)
        add_secrets(self._resolved.secrets)
        self.auth = ServerAuth(
            name=config.name,
            url=self._resolved.url,
            client_id=self._resolved.client_id,
            client_secret=self._resolved.client_secret,
            scopes=config.scopes,
        )
        #: Set by the composition root before :meth:`start` (``Service``); without it (``check``) the
        #: server offers only its connect tool.
        self.access: PersonalAccess | None = None
        self.tools: tuple[McpTool, ...] = ()
        self.error: str | None = "not started"
        self.listed = 0
        #: Told when :attr:`tools` changed (someone connected and the server's tools were listed).
        self.on_change: Callable[[], None] | None = None
        self._listing = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.config.name

    def redact(self, text: str) -> str:
        return self._resolved.redact(text)

    async def start(self) -> None:
        """List the tools as a recently connected person, else offer the connect tool."""
        self.error = None
        self.tools = (self._connect_tool(),)
        if self.access is None:
            return
        self.access.servers[self.name] = self.auth
        for user in await self.access.tokens.connected(self.name, limit=_LISTERS):
            if await self.list_as(user):
                return
        log.info("MCP server %s acts per person; nobody connected yet: offering its connect tool", self.name)

    async def stop(self) -> None:
        return None  # nothing stays open between calls

    async def list_as(self, user: str) -> bool:
        """List the server's tools with ``user``'s token; whether that worked (tools then replaced)."""
        access = self.access
        if access is None:
            return False
        async with self._listing:
            try:
                async with self._session(Person(user, "", "", ""), quiet=True) as toolset:
                    listed = await toolset.list_tools()
            except Exception as exc:
                reason = self.redact(reason_of(exc, self.config.startup_timeout, "list"))
                log.info("MCP server %s: could not list tools for a connected person: %s", self.name, reason)
                return False
            offered = McpServer.offered(self.config, listed)
            self.listed = len(listed)
            self.tools = (*offered, self._connect_tool())
        log.info("MCP server %s (per person): %d tools, %d offered", self.name, self.listed, len(offered))
        if self.on_change is not None:
            self.on_change()
        return True

    def _connect_tool(self) -> McpTool:
        return McpTool(
            name=f"{self.name}_{CONNECT}",
            server=self.name,
            remote_name="",
            description=(
                f"Connect the {self.name} service for the person who asked: its tools act as that "
                "person, with their own account. Call it when they have not connected yet; they get a "
                "private link and you continue once they have connected."
            ),
            schema={"type": "object", "properties": {}, "additionalProperties": False},
            starts="active",
            # It changes nothing at the service: it asks the person themselves, privately, to connect.
            read_only=True,
        )

    def _session(self, person: Person, *, quiet: bool = False) -> MCPToolset[Any]:
        from fastmcp.client import Client
        from fastmcp.client.transports import StreamableHttpTransport
        from pydantic_ai.mcp import MCPToolset

        assert self.access is not None
        flow = provider(self.access, self.auth, person, quiet=quiet)
        url = self.auth.url
        transport = StreamableHttpTransport(
            url,
            auth=flow,
            httpx_client_factory=client_factory(url, ()),
            max_sse_event_size=MAX_ANSWER_BYTES,
        )
        client: Client[Any] = Client(transport, name="threadbound", init_timeout=self.config.startup_timeout)
        return MCPToolset(client, id=self.name, tool_error_behavior="error")

    async def call(self, tool: McpTool, args: dict[str, Any], scope: CallScope | None = None) -> Any:
        """Call ``tool`` as the person whose message led to ``scope``'s call; raises
        AuthorizationRequested when they were asked to connect."""
        from fastmcp.exceptions import ToolError

        person = _person(scope)
        if person is None:
            raise McpCallFailed(f"{tool.name} acts as the person who asked, and this call has none")
        if self.access is None:
            raise McpCallFailed(f"the {self.name} server is not set up for per-person calls")
        if not tool.remote_name:
            return await self._connect(person)
        try:
            async with asyncio.timeout(self.config.timeout + self.config.startup_timeout):
                async with self._session(person) as toolset:
                    return await toolset.direct_call_tool(tool.remote_name, args)
        except ToolError as exc:
            raise McpCallFailed(bounded(self.redact(f"{tool.name} failed: {exc}"), 300)) from exc
        except Exception as exc:
            if _asked(exc):
                raise AuthorizationRequested(self.name) from None
            log.warning("MCP call %s failed: %s", tool.name, type(exc).__name__)
            raise McpCallFailed(self.redact(reason_of(exc, self.config.timeout, "call"))) from exc

    async def _connect(self, person: Person) -> Any:
        """``NAME_connect``: list the tools as ``person`` (asking them to connect when they cannot)."""
        try:
            async with asyncio.timeout(self.config.startup_timeout):
                async with self._session(person) as toolset:
                    listed = await toolset.list_tools()
        except Exception as exc:
            if _asked(exc):
                raise AuthorizationRequested(self.name) from None
            raise McpCallFailed(self.redact(reason_of(exc, self.config.startup_timeout, "connect"))) from exc
        self.tools = (*McpServer.offered(self.config, listed), self._connect_tool())
        self.listed = len(listed)
        if self.on_change is not None:
            self.on_change()
        names = [t.name for t in self.tools if t.remote_name]
        return {"status": "connected", "tools": names, "note": "Find them with tool_search."}


def _person(scope: CallScope | None) -> Person | None:
    """Whom a call acts for: the requester of its run, with where their task waits."""
    if scope is None or not scope.person:
        return None
    session = scope.session
    return Person(scope.person, session.task.task_id, session.origin.channel, session.origin.thread)


def _asked(exc: BaseException) -> bool:
    """Whether ``exc`` (possibly wrapped by the transport's task groups) is AuthorizationRequested."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, AuthorizationRequested):
            return True
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack += [current.__cause__, current.__context__]
    return False


#: What a tool call's result says when the person was asked to connect.
def requested_result(server: str) -> dict[str, Any]:
    return {
        "status": "authorization_requested",
        "service": server,
        "message": (
            f"The person who asked has not connected {server} yet: they were sent a private link to "
            "connect. Your turn ends now; you continue when they have connected (or declined)."
        ),
    }


__all__ = ["CONNECT", "PersonalServer", "requested_result"]
