"""The model providers' HTTP, tested where it is sent: Anthropic Messages, OpenAI Responses
(``openai:NAME``) and OpenAI Chat Completions (``openai-chat:NAME``).

The app runs as in production (``MODEL`` names the provider; the real SDKs build and send the
requests); respx answers the SDKs' HTTP at the providers' own URLs (``httpx`` is aliased to the
SDKs' ``httpx2`` in ``conftest.py``). Slack is the local fake over real HTTP, as elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.usage import RunUsage

from app.agent.model_settings import cache_key, prompt_cache_settings
from app.agent.runtime import build_model
from app.runs.run import APOLOGY
from app.settings import Settings
from tests.support import events, prompts
from tests.support.harness import AppHarness
from threadbound_emulator import FakeSlack

JSON = dict[str, Any]
#: Usage the fake provider reports for each request, as the provider's own fields say it.
INPUT, OUTPUT, CACHE_READ, CACHE_WRITE = 1500, 40, 1200, 200


@dataclass(frozen=True)
class Provider:
    """One provider's wire: where requests go, and how its answers and failures look."""

    name: str
    model: str
    url: str
    overload_status: int
    #: The answer to a request: ``reply`` calls channel_reply with that text, ``None`` ends the turn.
    answer: Callable[[str | None, int], httpx.Response]
    #: The text of the request's newest user message, and whether it ends with a tool result.
    last_user_text: Callable[[JSON], str]
    ends_with_tool_result: Callable[[JSON], bool]


# -- Anthropic Messages (pydantic-ai streams the request: max_tokens defaults to the model's maximum) --


def _sse(events_: list[JSON]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events_)


def _anthropic_answer(reply: str | None, serial: int) -> httpx.Response:
    usage = {
        # Anthropic's input_tokens counts only the uncached rest of the prompt.
        "input_tokens": INPUT - CACHE_READ - CACHE_WRITE,
        "cache_read_input_tokens": CACHE_READ,
        "cache_creation_input_tokens": CACHE_WRITE,
        "output_tokens": 1,
    }
    message = {
        "id": f"msg_{serial}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    if reply is not None:
        block: JSON = {"type": "tool_use", "id": f"toolu_{serial}", "name": "channel_reply", "input": {}}
        delta: JSON = {"type": "input_json_delta", "partial_json": json.dumps({"text": reply})}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": "done"}
        stop = "end_turn"
    stream = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": OUTPUT},
        },
        {"type": "message_stop"},
    ]
    return httpx.Response(200, content=_sse(stream), headers={"content-type": "text/event-stream"})


def _anthropic_last_user_text(body: JSON) -> str:
    for message in reversed(body["messages"]):
        if message["role"] == "user":
            content = message["content"]
            if isinstance(content, str):
                return content
            return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
    return ""


def _anthropic_ends_with_tool_result(body: JSON) -> bool:
    content = body["messages"][-1]["content"]
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


# -- OpenAI Responses --------------------------------------------------------------------------------


def _responses_answer(reply: str | None, serial: int) -> httpx.Response:
    if reply is not None:
        item: JSON = {
            "type": "function_call",
            "id": f"fc_{serial}",
            "call_id": f"call_{serial}",
            "name": "channel_reply",
            "arguments": json.dumps({"text": reply}),
            "status": "completed",
        }
    else:
        item = {
            "type": "message",
            "id": f"msg_{serial}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
    body = {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": "gpt-5",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            # OpenAI's input_tokens counts the whole prompt, cached part included.
            "input_tokens": INPUT,
            "input_tokens_details": {"cached_tokens": CACHE_READ, "cache_write_tokens": CACHE_WRITE},
            "output_tokens": OUTPUT,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": INPUT + OUTPUT,
        },
    }
    return httpx.Response(200, json=body)


def _responses_last_user_text(body: JSON) -> str:
    for item in reversed(body["input"]):
        if item.get("role") == "user":
            content = item["content"]
            if isinstance(content, str):
                return content
            return "\n".join(p.get("text", "") for p in content if p.get("type") == "input_text")
    return ""


def _responses_ends_with_tool_result(body: JSON) -> bool:
    return body["input"][-1].get("type") == "function_call_output"


# -- OpenAI Chat Completions ------------------------------------------------------------------------


def _chat_answer(reply: str | None, serial: int) -> httpx.Response:
    message: JSON = {"role": "assistant", "content": None if reply is not None else "done", "refusal": None}
    if reply is not None:
        message["tool_calls"] = [
            {
                "id": f"call_{serial}",
                "type": "function",
                "function": {"name": "channel_reply", "arguments": json.dumps({"text": reply})},
            }
        ]
    body = {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply is not None else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": INPUT,
            "prompt_tokens_details": {"cached_tokens": CACHE_READ, "cache_write_tokens": CACHE_WRITE},
            "completion_tokens": OUTPUT,
            "total_tokens": INPUT + OUTPUT,
        },
    }
    return httpx.Response(200, json=body)


def _chat_last_user_text(body: JSON) -> str:
    for message in reversed(body["messages"]):
        if message["role"] == "user":
            content = message["content"]
            if isinstance(content, str):
                return content
            return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


def _chat_ends_with_tool_result(body: JSON) -> bool:
    return body["messages"][-1]["role"] == "tool"


PROVIDERS = {
    "anthropic": Provider(
        "anthropic",
        "anthropic:claude-sonnet-5-5",
        "https://api.anthropic.com/v1/messages",
        529,
        _anthropic_answer,
        _anthropic_last_user_text,
        _anthropic_ends_with_tool_result,
    ),
    "openai": Provider(
        "openai",
        "openai:gpt-5",
        "https://api.openai.com/v1/responses",
        503,
        _responses_answer,
        _responses_last_user_text,
        _responses_ends_with_tool_result,
    ),
    "openai-chat": Provider(
        "openai-chat",
        "openai-chat:gpt-4o-mini",
        "https://api.openai.com/v1/chat/completions",
        503,
        _chat_answer,
        _chat_last_user_text,
        _chat_ends_with_tool_result,
    ),
}


class Wire:
    """The mocked provider endpoint: answers like a model that replies ``echo: <prompt>`` and then
    ends its turn, unless a failure is queued; records every request body."""

    def __init__(self, provider: Provider, route: respx.Route) -> None:
        self.provider = provider
        self.bodies: list[JSON] = []
        self.headers: list[httpx.Headers] = []
        self.failures: list[str] = []
        self.serial = 0
        route.side_effect = self._answer

    async def _answer(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        self.headers.append(request.headers)
        self.serial += 1
        if self.failures:
            return await self._fail(self.failures[0])
        body = self.bodies[-1]
        if self.provider.ends_with_tool_result(body):
            return self.provider.answer(None, self.serial)
        # The prompt's last row is {"author": "Alice", "message": "msg_…", "text": "@threadbound <text>"}.
        row = prompts.rows(self.provider.last_user_text(body))[-1]
        prompt = str(row["text"]).removeprefix("@threadbound ")
        return self.provider.answer(f"echo: {prompt}", self.serial)

    async def _fail(self, kind: str) -> httpx.Response:
        # retry-after-ms: the SDKs honour it, so their own retries do not slow the test down.
        fast = {"retry-after-ms": "1"}
        if kind == "rate_limited":
            error = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}
            return httpx.Response(429, json=error, headers=fast)
        if kind == "overloaded":
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return httpx.Response(self.provider.overload_status, json=error, headers=fast)
        raise httpx.ReadTimeout("the provider did not answer in time")


@pytest.fixture(params=list(PROVIDERS))
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    provider = PROVIDERS[request.param]
    with respx.mock(assert_all_called=False) as mock:
        yield Wire(provider, mock.post(provider.url))


def harness(slack: FakeSlack, wire: Wire, data_dir: Path) -> AppHarness:
    """The app building its model from MODEL as production does, with the provider's API key."""
    return AppHarness(
        slack,
        model=None,
        model_name=wire.provider.model,
        data_dir=data_dir,
        openai_api_key="sk-test",
        anthropic_api_key="sk-ant-test",
        stream="off",  # the recorded provider answers are whole JSON responses, not event streams
    )


def workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


async def say(app: AppHarness, text: str, thread_ts: str | None = None) -> str:
    """Post ``text`` (a mention when it starts a thread) and wait until the runs it caused end."""
    if thread_ts is None:
        ts = app.slack.add_message("C1", f"<@UBOT> {text}", user="U1")
        envelope = events.app_mention("C1", "U1", f"<@UBOT> {text}", ts)
    else:
        ts = app.slack.add_message("C1", text, user="U1", thread_ts=thread_ts)
        envelope = events.message("C1", "U1", text, ts, thread_ts=thread_ts)
    response = await app.deliver(envelope)
    assert response.status == 200
    await app.idle()
    return ts


def bot_texts(slack: FakeSlack, root: str) -> list[str]:
    return [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]


async def task_id(app: AppHarness, root: str) -> str:
    assert app.service is not None
    found = await app.service.store.find_task("C1", root)
    assert found is not None
    return found


# -- cache breakpoints and keys ---------------------------------------------------------------------------


async def test_cache_breakpoints_or_key_are_on_the_wire(tmp_path: Path, wire: Wire) -> None:
    """Anthropic requests carry cache breakpoints after the instructions, the tool definitions and the
    newest message; OpenAI requests carry one prompt_cache_key per task, the same on every request."""
    async with FakeSlack() as slack:
        workspace(slack)
        async with harness(slack, wire, tmp_path) as app:
            root = await say(app, "first question")
            await say(app, "second question", thread_ts=root)
            other = await say(app, "another conversation")
            ids = [await task_id(app, root), await task_id(app, other)]
        assert bot_texts(slack, root) == ["echo: first question", "echo: second question"]
    # Two requests per turn (the reply, then the end of the turn).
    assert len(wire.bodies) == 6
    if wire.provider.name == "anthropic":
        for body in wire.bodies:
            assert body["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
            assert body["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
            assert all("cache_control" not in tool for tool in body["tools"][:-1])
            newest = body["messages"][-1]["content"]
            assert newest[-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
            assert "prompt_cache_key" not in body
    else:
        keys = [body.get("prompt_cache_key") for body in wire.bodies]
        assert keys == [cache_key(ids[0])] * 4 + [cache_key(ids[1])] * 2
        assert ids[0] != ids[1]


# -- failures --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rate_limited", "overloaded", "timeout"])
async def test_a_provider_failure_apologises_and_the_task_stays_usable(
    tmp_path: Path, wire: Wire, kind: str
) -> None:
    """A 429, an overload (Anthropic 529, OpenAI 503) or a read timeout, still failing after the SDK's
    two retries, ends the run with the apology; the next message in the thread is answered with the
    failed turn's message in its history."""
    async with FakeSlack() as slack:
        workspace(slack)
        async with harness(slack, wire, tmp_path) as app:
            wire.failures.append(kind)
            root = await say(app, "will this fail")
            assert len(wire.bodies) == 3  # the first attempt and the SDK's two retries
            wire.failures.clear()
            await say(app, "try again", thread_ts=root)
        assert bot_texts(slack, root) == [APOLOGY, "echo: try again"]
    retry = json.dumps(wire.bodies[3])
    assert "will this fail" in retry and "try again" in retry


# -- usage ------------------------------------------------------------------------------------------------


async def test_usage_is_parsed_from_the_provider_response(tmp_path: Path, wire: Wire) -> None:
    """Input, output, cache-read and cache-write tokens of every request, as the provider reported
    them, are in the saved transcript, and sum to the run's RunUsage."""
    async with FakeSlack() as slack:
        workspace(slack)
        async with harness(slack, wire, tmp_path) as app:
            root = await say(app, "how much did this cost")
            assert app.service is not None
            task = await app.service.store.get_task(await task_id(app, root))
    assert task is not None
    responses = [
        m for m in ModelMessagesTypeAdapter.validate_json(task.transcript) if isinstance(m, ModelResponse)
    ]
    assert len(responses) == 2
    usage = RunUsage()
    for response in responses:
        usage.incr(response.usage)
        usage.requests += 1
    # pydantic-ai's input_tokens is the whole prompt on every provider (Anthropic's cached parts added).
    assert (usage.input_tokens, usage.output_tokens) == (2 * INPUT, 2 * OUTPUT)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (2 * CACHE_READ, 2 * CACHE_WRITE)
    assert usage.requests == 2


@pytest.mark.parametrize(
    ("base_url", "sends_key"),
    [
        ("", True),
        ("https://my-resource.openai.azure.com/openai/v1", True),
        ("http://127.0.0.1:8000/v1", False),  # vLLM, Ollama, LM Studio: a field they may refuse
    ],
)
def test_the_cache_key_goes_only_to_openai_itself(base_url: str, sends_key: bool) -> None:
    """prompt_cache_key is set for OpenAI's API and Azure OpenAI, not for other OpenAI-compatible servers."""
    settings = Settings(_env_file=None, openai_api_key="sk-test", openai_base_url=base_url)  # type: ignore[call-arg]
    for name in ("openai:gpt-5", "openai-chat:gpt-4o-mini"):
        chosen = prompt_cache_settings(build_model(name, settings), "T1")
        assert chosen == ({"openai_prompt_cache_key": cache_key("T1")} if sends_key else {})
    assert cache_key("T1") != cache_key("T2")
