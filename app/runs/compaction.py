"""Long conversations compact instead of forgetting.

When a task's history (its summary plus its messages' text, tool calls and results, at about 4
characters a token) passes
``COMPACT_AFTER_TOKENS``, the older turns are summarised once by the model, before the run starts,
and the summary is stored on the task (``tasks.summary``, saved with the run). Every request then
begins with that summary, followed by the turns after it. The newest turns (up to half the
threshold, at least the last one) are kept as they were; cuts fall only before a person's prompt,
so tool calls stay with their results. A later compaction summarises the previous summary with
the turns that followed it.

Why before the run and not in a per-request history processor: the summary then changes only when
a compaction happens, never inside a run, so the prefix every request repeats stays byte for byte
the same (the provider's prompt cache keeps serving it). The summariser is told to keep handles
(``msg_…``, ``file_…``) verbatim: they are task-scoped and stored, so they stay valid after the
turns that minted them are gone. The compaction's own request is stored as usage like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from pydantic_ai.direct import model_request
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model

from app.agent.usage import UsageMeter

log = logging.getLogger(__name__)

#: Characters per token of the estimate that decides when to compact.
CHARS_PER_TOKEN = 4
#: The first line of the summary message at the start of a compacted history.
SUMMARY_HEADER = "Summary of the earlier part of this conversation (its older turns were compacted into it):"
SUMMARISER_INSTRUCTIONS = (
    "You compact the older part of a conversation between people and an assistant in a chat app, "
    "so the assistant can continue it without the full text. Write a concise summary in plain text: "
    "who asked for what, facts, names, numbers, decisions, files, what the assistant did and promised, "
    "and open questions. Copy every handle (words like msg_... and file_...) exactly as written, next "
    "to what it names: the assistant uses them to act on those messages and files later. "
    "Start with the summary itself, no preamble."
)
# One tool result in the summariser's input is cut to this many characters.
_TOOL_RESULT_CHARS = 2_000


def estimate_tokens(text: str | bytes) -> int:
    return len(text) // CHARS_PER_TOKEN


@dataclass(slots=True)
class Compactor:
    model: Model
    #: ``COMPACT_AFTER_TOKENS``; 0 turns compaction off.
    after_tokens: int
    #: Around each summariser request: the ack gate and the request's timing
    #: (``app.ops.observe.ModelTiming.request``), as for the agent's own requests.
    around_request: Callable[[], AbstractAsyncContextManager[None]] | None = None

    @staticmethod
    def prefix(summary: str) -> list[ModelMessage]:
        """The messages a compacted history starts with; the same for every request until the next
        compaction."""
        if not summary:
            return []
        return [
            ModelRequest(parts=[UserPromptPart(f"{SUMMARY_HEADER}\n{summary}")]),
            ModelResponse(parts=[TextPart("Understood.")]),
        ]

    async def compact(
        self, summary: str, transcript: list[ModelMessage], meter: UsageMeter
    ) -> tuple[str, list[ModelMessage]] | None:
        """The new summary and the transcript after it, or None when no compaction is due (or the
        summariser failed: the run goes on with the history as it was)."""
        if self.after_tokens <= 0 or not transcript:
            return None
        # What the model reads of each message (its text, tool calls and results); the instructions
        # a stored request also carries are sent once per request, not once per message.
        sizes = [estimate_tokens(render("", [m])) for m in transcript]
        if estimate_tokens(summary) + sum(sizes) <= self.after_tokens:
            return None
        cut = _cut(transcript, sizes, keep=self.after_tokens // 2)
        if cut == 0:
            return None
        request = ModelRequest(
            parts=[UserPromptPart(render(summary, transcript[:cut]))], instructions=SUMMARISER_INSTRUCTIONS
        )
        try:
            async with self.around_request() if self.around_request else nullcontext():
                response = await model_request(self.model, [request])
        except Exception as exc:
            log.warning("compaction failed (%s); the run uses the history as it was", type(exc).__name__)
            return None
        await meter.add(response)
        text = "".join(p.content for p in response.parts if isinstance(p, TextPart)).strip()
        if not text:
            log.warning("compaction returned no text; the run uses the history as it was")
            return None
        log.info("compacted %d of %d transcript messages into a summary", cut, len(transcript))
        return text, transcript[cut:]


def _cut(messages: list[ModelMessage], sizes: list[int], *, keep: int) -> int:
    """Where the kept tail starts: the earliest prompt boundary whose tail fits in ``keep`` tokens,
    else the last boundary (the newest turn is always kept); 0 when nothing can be cut."""
    boundaries = [
        i
        for i, m in enumerate(messages)
        if i > 0 and isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)
    ]
    if not boundaries:
        return 0
    tail = 0
    fitting = boundaries[-1]
    for i in range(len(messages) - 1, 0, -1):
        tail += sizes[i]
        if tail > keep:
            break
        if i in boundaries:
            fitting = i
    return fitting


def render(summary: str, messages: list[ModelMessage]) -> str:
    """The older turns as plain text for the summariser, after the previous summary if any."""
    lines: list[str] = []
    if summary:
        lines += ["Summary so far:", summary, "", "The conversation after it:"]
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                lines.append(f"[message] {_content(part.content)}")
            elif isinstance(part, ToolReturnPart):
                result = part.model_response_str()
                if len(result) > _TOOL_RESULT_CHARS:
                    result = result[:_TOOL_RESULT_CHARS] + " …"
                lines.append(f"[tool result {part.tool_name}] {result}")
            elif isinstance(part, TextPart) and part.content.strip():
                lines.append(f"[assistant] {part.content}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"[assistant called {part.tool_name}] {part.args_as_json_str()}")
    return "\n".join(lines)


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(c if isinstance(c, str) else f"({type(c).__name__})" for c in content)
