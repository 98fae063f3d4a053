"""The providers that come as extras (``threadbound[google]``, ``[groq]``, ``[mistral]``,
``[bedrock]``), each answering one turn on its own wire.

The app builds its model from ``MODEL`` as in production (pydantic-ai's ``infer_model``, the
provider's real SDK and its key from the environment). Google, Groq and Mistral are answered by respx
at the provider's own URL (their SDKs use ``httpx2``, aliased in ``conftest.py``); Bedrock's SDK
(boto3) sends with urllib3, so it is pointed at a local fake over loopback
(``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``). Each test skips when its extra is not installed.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from aiohttp import web

from tests.support import events
from tests.support.harness import AppHarness, free_port
from threadbound_emulator import FakeSlack

JSON = dict[str, Any]


def _needs(module: str) -> pytest.MarkDecorator:
    missing = importlib.util.find_spec(module.split(".")[0]) is None
    return pytest.mark.skipif(missing, reason=f"{module} is not installed (pip install the extra)")


async def _one_turn(tmp_path: Path, model: str) -> list[str]:
    """Mention the bot once with MODEL=model; the bot's posts in that thread."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=None, model_name=model, data_dir=tmp_path, stream="off") as app:
            ts = slack.add_message("C1", "<@UBOT> hello there", user="U1")
            response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello there", ts))
            assert response.status == 200
            await app.idle()
        return [m["text"] for m in slack.messages("C1", ts) if m.get("bot_id")]


class Recorder:
    """Answers the first request with a channel_reply call and the next with plain text."""

    def __init__(self, answer: Callable[[str | None], JSON]) -> None:
        self.answer = answer
        self.bodies: list[JSON] = []
        self.headers: list[Any] = []

    def respond(self, body: JSON, headers: Any) -> JSON:
        self.bodies.append(body)
        self.headers.append(headers)
        return self.answer("echo: hello there" if len(self.bodies) == 1 else None)

    async def httpx(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self.respond(json.loads(request.content), request.headers))


def _google(reply: str | None) -> JSON:
    call: JSON = {"functionCall": {"name": "channel_reply", "args": {"text": reply}}}
    part = call if reply else {"text": ""}
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }


def _chat(reply: str | None, model: str) -> JSON:
    message: JSON = {"role": "assistant", "content": "" if reply else "done"}
    if reply:
        message["tool_calls"] = [
            {
                "id": "call00001",
                "type": "function",
                "function": {"name": "channel_reply", "arguments": json.dumps({"text": reply})},
            }
        ]
    return {
        "id": "chat-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if reply else "stop"},
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def _bedrock(reply: str | None) -> JSON:
    content: list[JSON] = (
        [{"toolUse": {"toolUseId": "tool-1", "name": "channel_reply", "input": {"text": reply}}}]
        if reply
        else [{"text": "done"}]
    )
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if reply else "end_turn",
        "usage": {"inputTokens": 100, "outputTokens": 10, "totalTokens": 110},
        "metrics": {"latencyMs": 5},
    }


@_needs("google.genai")
async def test_google_gemini_answers_a_mention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MODEL=google:NAME with GOOGLE_API_KEY sends generateContent to the Gemini API, with the key,
    and the model's channel_reply reaches the thread."""
    monkeypatch.setenv("GOOGLE_API_KEY", "google-test-key")
    wire = Recorder(_google)
    url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    with respx.mock(assert_all_called=False) as mock:
        mock.post(url).side_effect = wire.httpx
        posts = await _one_turn(tmp_path, "google:gemini-2.5-flash")
    assert posts == ["echo: hello there"]
    assert wire.headers[0]["x-goog-api-key"] == "google-test-key"
    tools = [f["name"] for t in wire.bodies[0]["tools"] for f in t.get("functionDeclarations", [])]
    assert "channel_reply" in tools


@_needs("groq")
async def test_groq_answers_a_mention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MODEL=groq:NAME with GROQ_API_KEY sends Chat Completions to Groq with the key as a bearer token,
    and the model's channel_reply reaches the thread."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test-key")
    wire = Recorder(lambda reply: _chat(reply, "llama-3.3-70b-versatile"))
    with respx.mock(assert_all_called=False) as mock:
        mock.post("https://api.groq.com/openai/v1/chat/completions").side_effect = wire.httpx
        posts = await _one_turn(tmp_path, "groq:llama-3.3-70b-versatile")
    assert posts == ["echo: hello there"]
    assert wire.headers[0]["authorization"] == "Bearer gsk-test-key"
    assert wire.bodies[0]["model"] == "llama-3.3-70b-versatile"


@_needs("mistralai")
async def test_mistral_answers_a_mention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MODEL=mistral:NAME with MISTRAL_API_KEY sends chat completions to Mistral with the key, and the
    model's channel_reply reaches the thread."""
    monkeypatch.setenv("MISTRAL_API_KEY", "mistral-test-key")
    wire = Recorder(lambda reply: _chat(reply, "mistral-large-latest"))
    with respx.mock(assert_all_called=False) as mock:
        mock.post("https://api.mistral.ai/v1/chat/completions").side_effect = wire.httpx
        posts = await _one_turn(tmp_path, "mistral:mistral-large-latest")
    assert posts == ["echo: hello there"]
    assert wire.headers[0]["authorization"] == "Bearer mistral-test-key"
    assert wire.bodies[0]["model"] == "mistral-large-latest"


@_needs("boto3")
async def test_bedrock_answers_a_mention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MODEL=bedrock:NAME with AWS credentials and a region sends a signed Converse request, and the
    model's channel_reply reaches the thread."""
    wire = Recorder(_bedrock)
    paths: list[str] = []

    async def converse(request: web.Request) -> web.Response:
        paths.append(request.path)
        return web.json_response(wire.respond(await request.json(), request.headers))

    app = web.Application()
    app.router.add_post("/model/{model}/converse", converse)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        posts = await _one_turn(tmp_path, "bedrock:anthropic.claude-3-5-haiku-20241022-v1:0")
    finally:
        await runner.cleanup()
    assert posts == ["echo: hello there"]
    assert paths[0] == "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse"
    assert wire.headers[0]["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIATESTTESTTEST/")
    assert "channel_reply" in [t["toolSpec"]["name"] for t in wire.bodies[0]["toolConfig"]["tools"]]
