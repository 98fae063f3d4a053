"""Scripted pydantic-ai models for tests and benchmarks (no network).

``scripted(fn)`` wraps a simple ``fn(turn) -> list[step]`` style script into a
``FunctionModel``: each model request sees a :class:`Turn` (the latest user
prompt text, the last tool results, the tools offered) and answers with text or
tool calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from .prompts import readable


@dataclass
class Turn:
    """What a scripted model sees at one request."""

    messages: list[ModelMessage]
    info: AgentInfo
    #: Text of the user prompt(s) in the newest request (empty when it only carries tool results).
    prompt: str
    #: Tool results in the newest request, by tool name (parsed JSON when possible).
    results: list[tuple[str, Any]] = field(default_factory=list)
    #: How many model requests this run made before this one.
    step: int = 0

    @property
    def tools(self) -> list[str]:
        return [t.name for t in self.info.function_tools]

    @property
    def history_text(self) -> str:
        """Every user prompt and text answer of the whole transcript, joined (for resume checks)."""
        out: list[str] = []
        for m in self.messages:
            for p in m.parts:
                if isinstance(p, UserPromptPart) and isinstance(p.content, str):
                    out.append(p.content)
                elif isinstance(p, TextPart):
                    out.append(p.content)
        return "\n".join(out)


def call(name: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool_name=name, args=json.dumps(args))


Script = Callable[[Turn], list[Any] | Awaitable[list[Any]]]


def scripted(
    script: Script, *, delay: float = 0.0, chunk: int = 0, chunk_delay: float = 0.0
) -> FunctionModel:
    """A FunctionModel answering with ``script(turn)``: a list of str (text) and ToolCallParts.

    Streamed requests (``STREAM``) get the same answer as a stream: text, then each tool call's
    JSON arguments, in pieces of ``chunk`` characters (0: whole) with ``chunk_delay`` seconds
    between pieces, as a slowly writing model would send them."""

    async def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if delay:
            await asyncio.sleep(delay)
        return await _answer(script, messages, info)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if delay:
            await asyncio.sleep(delay)
        response = await _answer(script, messages, info)
        first = True
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                pieces: list[str | DeltaToolCalls] = list(_pieces(part.content, chunk)) or [""]
            elif isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                head = DeltaToolCall(name=part.tool_name, json_args="", tool_call_id=part.tool_call_id)
                pieces = [{index: head}, *({index: DeltaToolCall(json_args=p)} for p in _pieces(args, chunk))]
            else:
                continue
            for piece in pieces:
                if not first and chunk_delay:
                    await asyncio.sleep(chunk_delay)
                first = False
                yield piece

    return FunctionModel(fn, stream_function=stream)


def _pieces(text: str, size: int) -> list[str]:
    if size <= 0 or len(text) <= size:
        return [text] if text else []
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _answer(script: Script, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    prompt_parts: list[str] = []
    results: list[tuple[str, Any]] = []
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                if not part.content.startswith("<system>"):  # pydantic-ai's tool-availability notices
                    prompt_parts.append(part.content)
            elif isinstance(part, ToolReturnPart):
                content = part.content
                if isinstance(content, str):
                    try:
                        content = json.loads(content)
                    except ValueError:
                        pass
                results.append((part.tool_name, content))
    step = 0
    for m in reversed(messages[:-1]):
        if isinstance(m, ModelResponse):
            step += 1
        if isinstance(m, ModelRequest) and any(
            isinstance(p, UserPromptPart) and not str(p.content).startswith("<system>") for p in m.parts
        ):
            break
    turn = Turn(list(messages), info, "\n".join(prompt_parts), results, step)
    out = script(turn)
    if asyncio.iscoroutine(out):
        out = await out
    parts = [TextPart(p) if isinstance(p, str) else p for p in out]  # type: ignore[union-attr]
    return ModelResponse(parts=parts or [TextPart("")])


def echo_script(turn: Turn) -> list[Any]:
    """Reply 'echo: <prompt as read: "Alice (msg_…): text">' once, then end silently."""
    if turn.prompt:
        return [call("channel_reply", text=f"echo: {readable(turn.prompt)}")]
    return [""]


def echo_model(delay: float = 0.0) -> FunctionModel:
    return scripted(echo_script, delay=delay)
