"""Scripted pydantic-ai models for tests and benchmarks (no network).

``scripted(fn)`` wraps a simple ``fn(turn) -> list[step]`` style script into a
``FunctionModel``: each model request sees a :class:`Turn` (the latest user
prompt text, the last tool results, the tools offered) and answers with text or
tool calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
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
from pydantic_ai.models.function import AgentInfo, FunctionModel


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


def scripted(script: Script, *, delay: float = 0.0) -> FunctionModel:
    """A FunctionModel answering with ``script(turn)``: a list of str (text) and ToolCallParts."""

    async def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if delay:
            await asyncio.sleep(delay)
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

    return FunctionModel(fn)


def echo_script(turn: Turn) -> list[Any]:
    """Reply 'echo: <prompt text>' once, then end silently."""
    if turn.prompt:
        return [call("channel_reply", text=f"echo: {turn.prompt}")]
    return [""]


def echo_model(delay: float = 0.0) -> FunctionModel:
    return scripted(echo_script, delay=delay)
