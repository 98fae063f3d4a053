"""The baseline servers: a Bolt ``AsyncApp`` on aiohttp, as a Bolt tutorial or Slack's samples write it.

``python -m bench.bolt_baseline noop``  acks every event; its ``app_mention`` listener does nothing.
``python -m bench.bolt_baseline turn``  the Slack AI bot people actually run (ChatGPT-in-Slack, Slack's
                                        bolt-python assistant template): on every mention it sets the
                                        assistant status, rebuilds the conversation from
                                        ``conversations.replies`` (bot posts as the assistant's turns,
                                        everyone else's as "<@U…>: text"), and runs a pydantic-ai
                                        ``Agent`` (the same library and model wire as ours) whose one
                                        tool, ``channel_reply``, posts into the thread. No prompt-cache
                                        settings, as in those samples.

``GET /gc`` runs a garbage collection (``task_memory`` measures RSS after one, on both sides).

With ``PEER_AGENT`` (a JSON file: ``instructions`` and ``tools``, each ``name``, ``description`` and
``parameters``: what ours sends the model, taken from one of its requests) the ``turn`` bot's agent
has those instructions and tools instead of its own: ``channel_reply`` still posts, the others
answer ``"ok"``. The model then reads the same request from both bots (``turn_overhead_c1_same_agent``).

Environment: ``PORT``, ``HOST``, ``SLACK_SIGNING_SECRET``, ``SLACK_BOT_TOKEN``, ``SLACK_API_URL``,
``MODEL`` (``openai-chat:NAME`` with ``OPENAI_BASE_URL``/``OPENAI_API_KEY``, or ``anthropic:NAME``
with ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``). ``GET /healthz`` answers 200 once serving.
Stops on SIGTERM. Nothing is stored: no durability, leases, handles or effect journal.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

INSTRUCTIONS = (
    "You are a helpful assistant in a Slack workspace. Answer the latest message in the thread by "
    "calling channel_reply with your answer in Markdown."
)


@dataclass
class Thread:
    client: AsyncWebClient
    channel: str
    thread_ts: str


def model_from_env() -> Model:
    provider, _, name = os.environ.get("MODEL", "openai-chat:fake").partition(":")
    if provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(
            name, provider=AnthropicProvider(api_key=os.environ.get("ANTHROPIC_API_KEY", "x"))
        )
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    oai = OpenAIProvider(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY", "x")
    )
    return OpenAIChatModel(name, provider=oai)


async def _post(ctx: RunContext[Thread], text: str, **_: Any) -> str:
    thread = ctx.deps
    await thread.client.chat_postMessage(channel=thread.channel, thread_ts=thread.thread_ts, text=text)
    return "posted"


async def _ok(ctx: RunContext[Thread], **_: Any) -> str:
    return "ok"


def build_agent(model: Model, spec: dict[str, Any] | None = None) -> Agent[Thread, str]:
    if spec is not None:  # ours's instructions and tools (module doc)
        tools = [
            Tool.from_schema(
                _post if t["name"] == "channel_reply" else _ok,
                t["name"],
                t.get("description"),
                t["parameters"],
                takes_ctx=True,
            )
            for t in spec["tools"]
        ]
        return Agent(model, deps_type=Thread, instructions=spec["instructions"], tools=tools)
    agent = Agent(model, deps_type=Thread, instructions=INSTRUCTIONS)

    @agent.tool
    async def channel_reply(ctx: RunContext[Thread], text: str) -> str:
        """Post your answer (Markdown) in the thread."""
        return await _post(ctx, text)

    return agent


def history_from_replies(messages: list[dict[str, Any]]) -> list[ModelMessage]:
    """The thread as model messages: the bot's posts as its answers, the rest as people's messages."""
    history: list[ModelMessage] = []
    for message in messages:
        text = str(message.get("text") or "")
        if message.get("bot_id"):
            history.append(ModelResponse(parts=[TextPart(text)]))
        else:
            history.append(ModelRequest(parts=[UserPromptPart(f"<@{message.get('user')}>: {text}")]))
    return history


def build(mode: str) -> AsyncApp:
    token = os.environ["SLACK_BOT_TOKEN"]
    app = AsyncApp(
        token=token,
        signing_secret=os.environ["SLACK_SIGNING_SECRET"],
        client=AsyncWebClient(token=token, base_url=os.environ["SLACK_API_URL"]),
    )
    if mode == "noop":

        @app.event("app_mention")
        async def noop() -> None:
            return None

        return app

    spec_path = os.environ.get("PEER_AGENT")
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8")) if spec_path else None  # at start-up
    agent = build_agent(model_from_env(), spec)

    @app.event("app_mention")
    async def turn(event: dict[str, Any], client: AsyncWebClient) -> None:
        channel = event["channel"]
        thread_ts = event.get("thread_ts") or event["ts"]
        await client.assistant_threads_setStatus(
            channel_id=channel, thread_ts=thread_ts, status="is thinking…"
        )
        replies = await client.conversations_replies(channel=channel, ts=thread_ts, limit=1000)
        history = history_from_replies(list(replies.get("messages") or []))
        prompt = history.pop() if history and isinstance(history[-1], ModelRequest) else None
        latest = prompt.parts[0].content if prompt is not None else str(event.get("text") or "")
        await agent.run(str(latest), message_history=history, deps=Thread(client, channel, thread_ts))

    return app


async def main(mode: str) -> None:
    app = build(mode)
    web_app = app.web_app(path="/slack/events")

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def collect(_: web.Request) -> web.Response:
        # task_memory measures the peer's RSS after a collection, as it does ours.
        return web.json_response({"collected": gc.collect()})

    web_app.router.add_get("/healthz", healthz)
    web_app.router.add_get("/gc", collect)
    runner = web.AppRunner(web_app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=os.environ.get("HOST", "127.0.0.1"), port=int(os.environ["PORT"]))
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("noop", "turn"):
        sys.exit("usage: python -m bench.bolt_baseline noop|turn")
    asyncio.run(main(sys.argv[1]))
