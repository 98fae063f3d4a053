"""What a server says to threadbound on its own: log lines, a changed tool list, sampling requests.

- *Logging* (``notifications/message``): written to the app's log at debug level under
  ``app.agent.mcp.talkback``, bounded, through the same handlers as every line, which leave out
  every secret the app knows (the server's expanded ``${VAR}`` values among them).
- *Tool list changes* (``notifications/tools/list_changed``): the server's tools are listed again
  and what ``tool_search`` can find follows from the next step of every run.
- *Sampling* (``sampling/createMessage``): refused unless the agent file allows it for the server
  (``sampling = true``); then answered by the app's model for the person whose call the server is
  serving, at most ``sampling_max_tokens`` tokens, counted and refused like that person's own
  requests against their budget.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .scope import InFlight, no_owner

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from app.agent.usage import Budgets

log = logging.getLogger(__name__)
server_log = log  # one logger: its lines are the servers' own words, at debug

#: Characters of a server's log line kept.
LOG_LINE_CHARS = 1_000


async def write_log(server: str, message: Any) -> None:
    """A server's ``notifications/message``, at debug level, on one bounded line."""
    if not server_log.isEnabledFor(logging.DEBUG):
        return
    data = message.data
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    text = " ".join(text.split())[:LOG_LINE_CHARS]
    origin = f"{server}/{message.logger}" if message.logger else server
    server_log.debug("MCP %s [%s]: %s", origin, message.level, text)


def message_handler(on_tools_changed: Callable[[], Awaitable[None]]) -> Any:
    """A FastMCP message handler that re-lists tools on ``tools/list_changed``."""
    from fastmcp.client.messages import MessageHandler

    class _Handler(MessageHandler):
        async def on_tool_list_changed(self, message: Any) -> None:
            await on_tools_changed()

    return _Handler()


class Sampler:
    """Answers one server's sampling requests with the app's model, for the call's person."""

    def __init__(
        self, server: str, inflight: InFlight, model: Model, max_tokens: int, budgets: Budgets | None
    ) -> None:
        self.server = server
        self.inflight = inflight
        self.model = model
        self.max_tokens = max_tokens
        self.budgets = budgets

    async def __call__(self, messages: list[Any], params: Any, context: Any) -> Any:
        import mcp_types
        from pydantic_ai import _mcp
        from pydantic_ai.direct import model_request
        from pydantic_ai.settings import ModelSettings

        scope = self.inflight.owner()
        if scope is None:
            return no_owner("sampling", self.server, len(self.inflight))
        if self.budgets is not None:
            hit = await self.budgets.exceeded(scope.person)
            if hit is not None:
                return mcp_types.ErrorData(code=-32600, message="the person's daily model budget is spent")
        asked = params.max_tokens if isinstance(params.max_tokens, int) and params.max_tokens > 0 else None
        settings = ModelSettings(max_tokens=min(asked or self.max_tokens, self.max_tokens))
        if params.temperature is not None:
            settings["temperature"] = params.temperature
        try:
            response = await model_request(
                self.model, _mcp.map_from_mcp_params(params), model_settings=settings
            )
        except Exception as exc:
            log.warning("MCP server %s: a sampling request failed: %s", self.server, type(exc).__name__)
            return mcp_types.ErrorData(code=-32603, message=f"the model request failed: {type(exc).__name__}")
        if scope.usage is not None:
            await scope.usage.add(response, model=self.model.model_name)
        log.info(
            "MCP server %s sampled %d output tokens for %s",
            self.server,
            response.usage.output_tokens,
            scope.tool,
        )
        return mcp_types.CreateMessageResult(
            role="assistant", content=_mcp.map_from_model_response(response), model=self.model.model_name
        )
