"""A fake Anthropic Messages API that bills like Anthropic, prompt cache included.

``async with FakeAnthropic() as llm:`` serves ``POST /v1/messages`` on 127.0.0.1 (JSON, or SSE when
``"stream": true``, which pydantic-ai uses at its default ``max_tokens``). Point a model at it with
``ANTHROPIC_BASE_URL=llm.base_url``.

The model: a request whose newest message is a person's calls ``channel_reply`` with a fixed-size
answer; a request ending with a tool result ends the turn with the text "done".

Tokens are counted from what the server receives, about 4 characters each, over the request in the
order Anthropic caches it: tool definitions, system blocks, then every message's content blocks
(``cache_control`` markers excluded: they are not content). The prompt cache follows Anthropic's
rules, simplified: a breakpoint (``cache_control`` on a block, or the top-level ``cache_control``,
which marks the last block) writes the prefix up to it, if it is at least ``MIN_CACHEABLE`` tokens;
a later request reads the longest written prefix that ends at one of its breakpoints or up to 20
blocks before one. Billed input = uncached + 0.1 x cache reads + 1.25 x cache writes (5-minute cache).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JSON = dict[str, Any]
CHARS_PER_TOKEN = 4
MIN_CACHEABLE = 1024
LOOKBACK_BLOCKS = 20
READ_PRICE, WRITE_PRICE = 0.1, 1.25
#: The answer's length in characters (a short paragraph).
ANSWER_CHARS = 400
_FILLER = (
    "Here is what I found in this thread, summarised with the steps that matter and the one caveat "
    "worth keeping in mind before you go ahead with it. "
)


@dataclass
class Billed:
    """One request's input, as Anthropic would report and bill it."""

    total: int
    cache_read: int
    cache_write: int
    #: The request's blocks, serialised without cache markers (for prefix comparisons).
    blocks: list[str]

    @property
    def uncached(self) -> int:
        return self.total - self.cache_read - self.cache_write

    @property
    def billed(self) -> float:
        return self.uncached + READ_PRICE * self.cache_read + WRITE_PRICE * self.cache_write


def answer_text(serial: int) -> str:
    head = f"Answer {serial}: "
    body = (_FILLER * (ANSWER_CHARS // len(_FILLER) + 1))[: ANSWER_CHARS - len(head)]
    return head + body


def _strip(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: _strip(v) for k, v in block.items() if k != "cache_control"}
    if isinstance(block, list):
        return [_strip(v) for v in block]
    return block


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" in block


def blocks_of(body: JSON) -> tuple[list[str], list[int]]:
    """The request's blocks in cache order, serialised, and the indexes carrying a breakpoint."""
    raw: list[Any] = list(body.get("tools") or [])
    system = body.get("system") or []
    raw += [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
    for message in body.get("messages") or []:
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        raw += [{"role": message["role"], **part} for part in parts]
    marks = [i for i, block in enumerate(raw) if _marked(block)]
    if body.get("cache_control") and raw:
        marks.append(len(raw) - 1)
    return [json.dumps(_strip(b), sort_keys=True) for b in raw], sorted(set(marks))


class PromptCache:
    """Prefixes written at breakpoints, by hash (no expiry: a benchmark lasts minutes)."""

    def __init__(self) -> None:
        self._written: set[str] = set()

    def bill(self, body: JSON) -> Billed:
        blocks, marks = blocks_of(body)
        ends: list[int] = []  # tokens up to and including block i
        running = 0
        hashes: list[str] = []
        digest = hashlib.sha256()
        for block in blocks:
            running += len(block)
            ends.append(running // CHARS_PER_TOKEN)
            digest.update(block.encode())
            hashes.append(digest.copy().hexdigest())
        total = ends[-1] if ends else 0
        read_at = -1
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                if hashes[i] in self._written:
                    read_at = max(read_at, i)
                    break
        read = ends[read_at] if read_at >= 0 else 0
        write = 0
        for mark in marks:
            if ends[mark] >= MIN_CACHEABLE and mark > read_at:
                self._written.add(hashes[mark])
        writable = [m for m in marks if ends[m] >= MIN_CACHEABLE and m > read_at]
        if writable:
            write = ends[max(writable)] - read
        return Billed(total, read, write, blocks)


@dataclass
class FakeAnthropic:
    """The fake server; see the module docstring."""

    #: Every request body received, and its bill, in order.
    requests: list[JSON] = field(default_factory=list)
    bills: list[Billed] = field(default_factory=list)
    cache: PromptCache = field(default_factory=PromptCache)
    _turn_ended: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _runner: web.AppRunner | None = field(default=None, repr=False)
    _port: int | None = field(default=None, repr=False)

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/messages", self._messages)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the ``ANTHROPIC_BASE_URL`` (the SDK appends ``/v1/messages``)."""
        if self._port is None:
            raise RuntimeError("FakeAnthropic is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def turns_ended(self) -> int:
        """How many requests ended a turn (they carry a tool result)."""
        return sum(1 for body in self.requests if _ends_with_tool_result(body))

    async def wait_turns(self, count: int) -> None:
        """Wait until ``count`` turns have ended (bound it with ``asyncio.timeout``)."""
        while self.turns_ended < count:
            self._turn_ended.clear()
            await self._turn_ended.wait()

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        bill = self.cache.bill(body)
        self.bills.append(bill)
        serial = len(self.requests)
        if _ends_with_tool_result(body):
            self._turn_ended.set()
            block: JSON = {"type": "text", "text": "done"}
            stop = "end_turn"
        else:
            args = {"text": answer_text(serial)}
            block = {"type": "tool_use", "id": f"toolu_{serial}", "name": "channel_reply", "input": args}
            stop = "tool_use"
        output = len(json.dumps(block)) // CHARS_PER_TOKEN
        usage = {
            "input_tokens": bill.uncached,
            "cache_read_input_tokens": bill.cache_read,
            "cache_creation_input_tokens": bill.cache_write,
            "output_tokens": output,
        }
        message = {
            "id": f"msg_{serial}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or "claude-fake"),
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.json_response(message)
        return await self._stream(request, message, block, stop, output)

    async def _stream(
        self, request: web.Request, message: JSON, block: JSON, stop: str, output: int
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if block["type"] == "tool_use":
            start: JSON = {**block, "input": {}}
            delta: JSON = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        events = [
            {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
            {"type": "content_block_start", "index": 0, "content_block": start},
            {"type": "content_block_delta", "index": 0, "delta": delta},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output},
            },
            {"type": "message_stop"},
        ]
        for event in events:
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response


def _ends_with_tool_result(body: JSON) -> bool:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def common_prefix_share(previous: list[str], current: list[str]) -> float:
    """The share of ``current`` (in characters) that repeats ``previous``'s start byte for byte."""
    size = sum(len(b) for b in current)
    if not size:
        return 1.0
    same = 0
    for old, new in zip(previous, current, strict=False):
        if old == new:
            same += len(new)
            continue
        pairs = enumerate(zip(old, new, strict=False))
        same += next((i for i, (a, b) in pairs if a != b), min(len(old), len(new)))
        break
    return same / size
