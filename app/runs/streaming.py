"""pydantic-ai's streamed events → the session's streamed answer (``STREAM``).

A run with streaming on drives each model request and each tool step through
``node.stream(...)`` and hands every event to :class:`EventFeed`:

- a response's text, as it grows, becomes the source ``text:<request>:<part>``;
- a ``channel_reply`` call's ``text`` argument, parsed from the partial JSON of the
  call as it is generated (``pydantic_core.from_json(..., allow_partial="trailing-strings")``),
  becomes the source ``call:<tool call id>``, so the session finishes that stream when
  the call runs;
- every other tool call is a visible step ("Reading the thread", "Fetching report.csv",
  an MCP tool's name), in progress until its result, then complete or error.

What the session does with them is ``channel.streaming``'s business.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic_core
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelResponsePart,
    PartDeltaEvent,
    PartStartEvent,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
)

from channel.contract import Step
from channel.errors import ChannelError
from channel.session import ChannelSession
from channel.tools import spec_named
from storage.base import StoreError

log = logging.getLogger(__name__)

#: Modes of ``STREAM``.
MODES = ("auto", "off")
#: Tools that are the answer itself, not a step.
_NO_STEP = frozenset({"channel_reply"})


def check_mode(mode: str) -> str:
    mode = mode.strip().lower()
    if mode not in MODES:
        raise ValueError(f"STREAM must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


class EventFeed:
    """One run's events → ``session.stream_text`` / ``session.stream_step``."""

    def __init__(self, session: ChannelSession) -> None:
        self.session = session
        self._request = 0
        self._parts: dict[int, ModelResponsePart] = {}
        #: Tool calls shown as steps, by call id: their step (for the result's status).
        self._steps: dict[str, Step] = {}

    def new_request(self) -> None:
        self._request += 1
        self._parts = {}

    def model_event(self, event: object) -> None:
        if isinstance(event, PartStartEvent):
            self._parts[event.index] = event.part
            self._show(event.index, event.part)
        elif isinstance(event, PartDeltaEvent):
            part = self._parts.get(event.index)
            if part is None:
                return
            try:
                part = event.delta.apply(part)  # type: ignore[arg-type]
            except (ValueError, TypeError):  # a delta that does not fit its part: not ours to fix
                return
            self._parts[event.index] = part
            self._show(event.index, part)

    def _show(self, index: int, part: ModelResponsePart) -> None:
        if isinstance(part, TextPart):
            self.session.stream_text(f"text:{self._request}:{index}", part.content)
        elif isinstance(part, ToolCallPart) and part.tool_name == "channel_reply":
            text = reply_text(part.args)
            if text:
                self.session.stream_text(f"call:{part.tool_call_id}", text)

    async def tool_event(self, event: object) -> None:
        if isinstance(event, FunctionToolCallEvent):
            name = event.part.tool_name
            if name in _NO_STEP or event.args_valid is None:
                return
            title = await step_title(self.session, name, _args(event.part))
            step = Step(id=event.part.tool_call_id or name, title=title, status="in_progress")
            self._steps[event.part.tool_call_id] = step
            self.session.stream_step(step)
        elif isinstance(event, FunctionToolResultEvent):
            if event.tool_call_id not in self._steps:
                return
            step = self._steps.pop(event.tool_call_id)
            failed = isinstance(event.part, RetryPromptPart) or _is_error(event.part.content)
            self.session.stream_step(Step(step.id, step.title, "error" if failed else "complete"))


def reply_text(args: object) -> str:
    """The ``text`` argument of a (possibly half-generated) ``channel_reply`` call, or ``""``."""
    if isinstance(args, dict):
        value = args.get("text")
        return value if isinstance(value, str) else ""
    if not isinstance(args, str) or not args:
        return ""
    try:
        parsed = pydantic_core.from_json(args, allow_partial="trailing-strings")
    except ValueError:
        return ""
    value = parsed.get("text") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else ""


async def step_title(session: ChannelSession, tool: str, args: dict[str, Any]) -> str:
    """What a person reads while ``tool`` works, with the file's name or document's title when known."""
    if tool == "channel_fetch_file":
        name = await _file_name(session, args.get("file"))
        return f"Fetching {name}" if name else _title(tool)
    if tool == "channel_attach" and isinstance(args.get("path"), str):
        return f"Attaching {args['path'].rsplit('/', 1)[-1]}"[:200]
    if tool == "channel_post_document" and isinstance(args.get("title"), str):
        return f"Writing “{args['title']}”"[:200]
    return _title(tool)


def _title(tool: str) -> str:
    """The step title of ``tool``'s spec; a tool with none (an MCP tool) shows its name."""
    spec = spec_named(tool)
    return spec.step_title if spec is not None and spec.step_title is not None else tool


async def _file_name(session: ChannelSession, handle: object) -> str:
    if not isinstance(handle, str):
        return ""
    try:
        record = await session.handles.resolve(handle, "file")
    except (ChannelError, StoreError):
        return ""
    try:
        return str(json.loads(record.data or "{}").get("name") or "")[:200]
    except ValueError:
        return ""


def _is_error(content: object) -> bool:
    return isinstance(content, dict) and "error" in content


def _args(part: ToolCallPart) -> dict[str, Any]:
    try:
        return part.args_as_dict()
    except ValueError:
        return {}
