"""A fake OpenAI-compatible Chat Completions server, scripted per request.

``async with FakeOpenAI(script) as llm:`` serves ``POST /v1/chat/completions``
(JSON, or SSE when ``"stream": true``) and ``GET /v1/models`` on 127.0.0.1.
Point pydantic-ai at it with
``OpenAIChatModel("fake", provider=OpenAIProvider(base_url=llm.base_url, api_key="x"))``
(or ``MODEL=openai-chat:fake`` with ``OPENAI_BASE_URL=llm.base_url``).

``script(request_json) -> Reply`` decides each answer (it may also be async);
build replies with ``FakeOpenAI.text`` / ``tool_call`` / ``tool_calls``, or use
``FakeOpenAI.sequence`` for a fixed list. The default script calls
``channel_reply`` with ``"echo: <last user text>"`` and answers ``"done"`` after a
tool result.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from threadbound_emulator.faults import Fault, Faults, drop_connection, pause

from .prompts import readable

JSON = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One function call the fake model asks for."""

    name: str
    args: JSON


@dataclass(frozen=True)
class Reply:
    """One assistant answer: text, tool calls, or both (``text`` alongside calls is allowed)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


Script = Callable[[JSON], Reply | Awaitable[Reply]]


def message_text(message: JSON) -> str:
    """The text of a chat message whose ``content`` is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def last_user_text(request: JSON) -> str:
    """The text of the request's last ``user`` message ("" if none)."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def default_script(request: JSON) -> Reply:
    """After a tool result answer "done"; otherwise call ``channel_reply`` echoing the user."""
    messages = request.get("messages") or [{}]
    if messages[-1].get("role") == "tool":
        return FakeOpenAI.text("done")
    return FakeOpenAI.tool_call("channel_reply", {"text": f"echo: {readable(last_user_text(request))}"})


#: The fault key of ``POST /v1/chat/completions``.
COMPLETIONS = "completions"


@dataclass
class FakeOpenAI:
    """The fake server; see the module docstring."""

    script: Script = default_script
    #: Seconds to wait before answering each completion (slow-model benchmarks).
    delay: float = 0.0
    #: If set, requests must carry ``Authorization: Bearer <api_key>`` (else 401).
    api_key: str | None = None
    model: str = "fake"
    #: Every completion request body received, in order (failed ones included).
    requests: list[JSON] = field(default_factory=list, init=False)
    #: Scripted faults of the completions endpoint (shared helper with the Slack emulator).
    faults: Faults = field(default_factory=Faults, init=False, repr=False)
    _runner: web.AppRunner | None = field(default=None, init=False, repr=False)
    _port: int | None = field(default=None, init=False, repr=False)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1), init=False, repr=False)

    # ------------------------------------------------------------------ replies

    @staticmethod
    def text(text: str) -> Reply:
        """A plain text answer (``finish_reason: stop``)."""
        return Reply(text=text)

    @staticmethod
    def tool_call(name: str, args: JSON | None = None) -> Reply:
        """One tool call (``finish_reason: tool_calls``)."""
        return Reply(tool_calls=(ToolCall(name, dict(args or {})),))

    @staticmethod
    def tool_calls(*calls: tuple[str, JSON]) -> Reply:
        """Several tool calls in one answer (parallel calls)."""
        return Reply(tool_calls=tuple(ToolCall(name, dict(args)) for name, args in calls))

    @staticmethod
    def sequence(replies: Iterable[Reply], then: Script | None = None) -> Script:
        """A script answering ``replies`` in order, then ``then`` (default: ``default_script``)."""
        pending = list(replies)
        fallback = then or default_script

        def script(request: JSON) -> Reply | Awaitable[Reply]:
            if pending:
                return pending.pop(0)
            return fallback(request)

        return script

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeOpenAI:
        """Start serving on 127.0.0.1 with an OS-chosen port."""
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Close the server and its connections."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeOpenAI:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the OpenAI ``base_url``."""
        if self._port is None:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://127.0.0.1:{self._port}/v1"

    def fail(
        self,
        status: int = 500,
        times: int | None = 1,
        message: str = "fake failure",
        *,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``times`` completions (``None``: all) with an HTTP error,
        with a ``Retry-After`` header if ``retry_after`` is given.

        Note: the ``openai`` client retries 429/5xx twice by default, so ``times=1``
        is invisible to a default client; use ``max_retries=0`` or more ``times``."""
        self.faults.add(COMPLETIONS, Fault("fail", times, status, message, retry_after))

    def drop(self, times: int | None = 1) -> None:
        """Close the connection of the next ``times`` completions without an answer."""
        self.faults.add(COMPLETIONS, Fault("drop", times))

    def delay_next(self, seconds: float, times: int | None = 1) -> None:
        """Wait ``seconds`` more before answering the next ``times`` completions."""
        self.faults.add(COMPLETIONS, Fault("delay", times, seconds=seconds))

    @property
    def count(self) -> int:
        """How many completion requests arrived."""
        return len(self.requests)

    # ------------------------------------------------------------------ HTTP

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        error = {
            "message": "Incorrect API key provided",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
        return web.json_response({"error": error}, status=401)

    async def _models(self, request: web.Request) -> web.Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        model = {"id": self.model, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
        return web.json_response({"object": "list", "data": [model]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            error = {"message": "messages is required", "type": "invalid_request_error", "code": None}
            return web.json_response({"error": error}, status=400)
        self.requests.append(body)
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        fault = self.faults.next(COMPLETIONS)
        await pause(fault)
        if fault is not None and fault.kind == "drop":
            drop_connection(request)
        if fault is not None and fault.kind == "fail":
            error = {"message": fault.error, "type": "server_error", "code": None}
            return web.json_response({"error": error}, status=fault.status, headers=fault.headers())
        reply = self.script(body)
        if inspect.isawaitable(reply):
            reply = await reply
        if not isinstance(reply, Reply):
            raise TypeError(f"script returned {type(reply).__name__}, not Reply")
        serial = next(self._ids)
        model = str(body.get("model") or self.model)
        calls = [
            {
                "id": f"call_{serial}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
        usage = _usage(body, reply)
        if body.get("stream"):
            return await self._stream(request, serial, model, reply, calls, usage, body)
        message: JSON = {"role": "assistant", "content": reply.text, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        completion = {
            "id": f"chatcmpl-{serial}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
        return web.json_response(completion)

    async def _stream(
        self,
        request: web.Request,
        serial: int,
        model: str,
        reply: Reply,
        calls: list[JSON],
        usage: JSON,
        body: JSON,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        created = int(time.time())

        async def send(choices: list[JSON], extra: JSON | None = None) -> None:
            chunk: JSON = {
                "id": f"chatcmpl-{serial}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
            }
            chunk.update(extra or {})
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(d: JSON, finish: str | None = None) -> list[JSON]:
            return [{"index": 0, "delta": d, "finish_reason": finish, "logprobs": None}]

        await send(delta({"role": "assistant", "content": ""}))
        text = reply.text or ""
        for start in range(0, len(text), 16):
            await send(delta({"content": text[start : start + 16]}))
        for index, call in enumerate(calls):
            head = {"index": index, "id": call["id"], "type": "function"}
            head["function"] = {"name": call["function"]["name"], "arguments": ""}
            await send(delta({"tool_calls": [head]}))
            arguments = call["function"]["arguments"]
            for start in range(0, len(arguments), 16):
                part = {"index": index, "function": {"arguments": arguments[start : start + 16]}}
                await send(delta({"tool_calls": [part]}))
        await send(delta({}, "tool_calls" if calls else "stop"))
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            await send([], {"usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _usage(body: JSON, reply: Reply) -> JSON:
    prompt = sum(len(json.dumps(m)) for m in body.get("messages", [])) // 4 + 1
    completion = len(reply.text or "") // 4 + sum(len(json.dumps(c.args)) // 4 + 1 for c in reply.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


__all__ = ["FakeOpenAI", "Reply", "Script", "ToolCall", "default_script", "last_user_text", "message_text"]


class StuckFirst:
    """A model whose first request (of each round: :meth:`arm`) never returns, as if the process
    running it were killed meanwhile; every later one replies with the person's words once
    (``channel_reply("echo: …")``, then an empty final text)."""

    def __init__(self) -> None:
        self.first_request = asyncio.Event()
        self.release = asyncio.Event()

    def arm(self) -> None:
        """Make the next request the stuck one; the previous round's stuck request ends."""
        self.first_request = asyncio.Event()
        self.release.set()
        self.release = asyncio.Event()

    async def __call__(self, request: JSON) -> Reply:
        if not self.first_request.is_set():
            self.first_request.set()
            await self.release.wait()
            return FakeOpenAI.text("")
        if (request.get("messages") or [{}])[-1].get("role") == "tool":
            return FakeOpenAI.text("")
        return FakeOpenAI.tool_call("channel_reply", {"text": f"echo: {last_user_text(request)}"})
