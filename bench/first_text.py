"""first_text_latency and stream_slack_calls: how soon a person sees the answer begin, and at what cost.

Setup. The whole app in this process (``tests.support.harness.AppHarness``) next to FakeSlack, with a
scripted model that streams a 2,000-character answer in 20-character pieces spread over 5 seconds
(tiny: 300 characters over 1 second) as final text. Ours streams it into the thread (``STREAM=auto``,
default batching); the baseline is the same turn with ``STREAM=off``: the answer posted whole.

Measurement. From the model's first token to the first Web API call that puts answer text in the
thread (``chat.startStream``/``appendStream`` with text, or ``chat.postMessage``), as FakeSlack
receives it; and how many Slack calls the streamed answer took (start, appends, stop).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.support import events
from tests.support.harness import AppHarness
from threadbound_emulator import Call, FakeSlack

from . import Row, Scale

ROWS = ("first_text_latency", "stream_slack_calls")
_TEXT_METHODS = ("chat.startStream", "chat.appendStream", "chat.postMessage")
_STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream", "chat.postMessage")
PIECE = 20


def _answer(chars: int) -> str:
    words = "The launch moves to March third because QA needs another week of testing. "
    return (words * (chars // len(words) + 1))[:chars]


class _Writer:
    """A model that writes ``text`` as final text over ``seconds``; remembers its first token's time."""

    def __init__(self, text: str, seconds: float) -> None:
        self.text = text
        self.seconds = seconds
        self.first_token: float | None = None

    def _prompted(self, messages: list[ModelMessage]) -> bool:
        last = messages[-1]
        return isinstance(last, ModelRequest) and any(isinstance(p, UserPromptPart) for p in last.parts)

    async def whole(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not self._prompted(messages):
            return ModelResponse(parts=[TextPart("")])
        pieces = [self.text[i : i + PIECE] for i in range(0, len(self.text), PIECE)]
        self.first_token = time.perf_counter()
        await asyncio.sleep(self.seconds * (len(pieces) - 1) / len(pieces))
        return ModelResponse(parts=[TextPart(self.text)])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        if not self._prompted(messages):
            yield ""
            return
        pieces = [self.text[i : i + PIECE] for i in range(0, len(self.text), PIECE)]
        gap = self.seconds / len(pieces)
        for n, piece in enumerate(pieces):
            if n:
                await asyncio.sleep(gap)
            else:
                self.first_token = time.perf_counter()
            yield piece

    def model(self) -> FunctionModel:
        return FunctionModel(self.whole, stream_function=self.stream)


async def _turn(stream: str, text: str, seconds: float, tmp: Path) -> tuple[float, int]:
    """(seconds from first token to first visible text, Slack calls that carried the answer)."""
    writer = _Writer(text, seconds)
    seen: list[float] = []
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")

        def visible(call: Call) -> None:
            has_text = (
                call.params.get("chunks") or call.params.get("text") or call.params.get("markdown_text")
            )
            if call.method in _TEXT_METHODS and has_text and not seen:
                seen.append(time.perf_counter())

        slack.observe(visible)
        async with AppHarness(slack, model=writer.model(), data_dir=tmp, stream=stream) as app:
            root = slack.add_message("C1", "<@UBOT> what did we decide?", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> what did we decide?", root))
            await app.idle()
        calls = sum(slack.count(m) for m in _STREAM_METHODS)
        shown = "".join(
            b["text"]
            for m in slack.bot_messages("C1")
            for b in m.get("blocks", [])
            if b["type"] == "markdown"
        )
    if shown != text or writer.first_token is None or not seen:
        raise RuntimeError(f"the answer did not arrive intact (STREAM={stream})")
    return seen[0] - writer.first_token, calls


async def run(scale: Scale) -> list[Row]:
    chars, seconds = (300, 1.0) if scale.mode == "tiny" else (2000, 5.0)
    text = _answer(chars)
    with tempfile.TemporaryDirectory(prefix="bench-first-text-") as tmp:
        ours, ours_calls = await _turn("auto", text, seconds, Path(tmp) / "ours")
        base, base_calls = await _turn("off", text, seconds, Path(tmp) / "base")
    note = f"a {chars}-character answer written over {seconds:g} s; streamed in {ours_calls} Slack calls"
    return [
        Row(
            "first_text_latency",
            round(ours, 3),
            round(base, 3),
            "s",
            "<= 1.0 s",
            absolute=True,
            also={f"whole post >= {seconds * 0.9:g} s": base >= seconds * 0.9},
            note=note,
        ),
        Row("stream_slack_calls", ours_calls, base_calls, "calls", "<= 12 calls", absolute=True, note=note),
    ]
