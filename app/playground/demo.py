"""The demo model (``--demo``): an echo, not an LLM, so the playground runs with no key at all.

It answers every turn by replying, through the same ``channel_reply`` tool a real
model uses, with a labelled quote of what it was sent (the prompt exactly as the
model would see it), then ends the turn. It shows the wiring, not intelligence.
"""

from __future__ import annotations

import json

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
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


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = _prompt(messages)
    tools = {t.name for t in info.function_tools}
    if not prompt or "channel_reply" not in tools:
        return ModelResponse(parts=[TextPart("")])  # after the reply's result: end the turn quietly
    quoted = "\n".join(f"> {line}" for line in prompt.splitlines())
    text = f"{LABEL}\n\nThis is what the agent was sent:\n\n{quoted}"
    return ModelResponse(parts=[ToolCallPart("channel_reply", json.dumps({"text": text}))])


def demo_model() -> FunctionModel:
    return FunctionModel(_answer, model_name="demo-echo")


__all__ = ["LABEL", "demo_model"]
