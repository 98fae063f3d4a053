"""The demo model (``--demo``): an echo, not an LLM, so the playground runs with no key at all.

It answers every turn with a labelled quote of what it was sent (the prompt exactly
as the model would see it) as its final text, streamed a few words at a time like a
real model's, so the answer grows in the thread and gets its feedback buttons. It
shows the wiring, not intelligence.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

LABEL = "**Demo model** — an echo, not an LLM. Set `MODEL` (and its key) for real answers."


def _prompt(messages: list[ModelMessage]) -> str:
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return ""
    texts = [
        p.content
        for p in last.parts
        if isinstance(p, UserPromptPart)
        and isinstance(p.content, str)
        and not p.content.startswith("<system>")
    ]
    return "\n".join(texts)


def _text(messages: list[ModelMessage]) -> str:
    prompt = _prompt(messages)
    if not prompt:
        return ""
    quoted = "\n".join(f"> {line}" for line in prompt.splitlines())
    return f"{LABEL}\n\nThis is what the agent was sent:\n\n{quoted}"


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(_text(messages))])


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    # A few words at a time with a pause, as a model writes: the page shows the answer growing.
    for index, piece in enumerate(re.findall(r"\S+\s*|\s+", _text(messages)) or [""]):
        if index and index % 3 == 0:
            await asyncio.sleep(0.12)
        yield piece


def demo_model() -> FunctionModel:
    return FunctionModel(_answer, stream_function=_stream, model_name="demo-echo")


__all__ = ["LABEL", "demo_model"]
