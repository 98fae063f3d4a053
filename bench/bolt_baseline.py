"""The baseline servers: a bare Bolt ``AsyncApp`` on aiohttp, as a Bolt tutorial writes it.

``python -m bench.bolt_baseline noop``  acks every event; its ``app_mention`` listener does nothing.
``python -m bench.bolt_baseline turn``  acks, then calls the model (Chat Completions over HTTP with
                                        the ``openai`` client, as pydantic-ai does) and posts the
                                        answer with ``chat_postMessage`` into the mention's thread.

Environment: ``PORT``, ``HOST``, ``SLACK_SIGNING_SECRET``, ``SLACK_BOT_TOKEN``, ``SLACK_API_URL``,
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``. ``GET /healthz`` answers 200 once serving. Stops on SIGTERM.
Nothing is stored: this is what the work costs without durability, leases or an agent runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

REPLY_TOOL = {
    "type": "function",
    "function": {
        "name": "channel_reply",
        "description": "Reply in the thread.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}


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

    from openai import AsyncOpenAI

    llm = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY", "x"))

    @app.event("app_mention")
    async def turn(event: dict[str, Any], client: AsyncWebClient) -> None:
        completion = await llm.chat.completions.create(
            model="fake",
            messages=[{"role": "user", "content": str(event.get("text") or "")}],
            tools=[REPLY_TOOL],  # type: ignore[list-item]
        )
        message = completion.choices[0].message
        text = message.content or ""
        for call in message.tool_calls or []:
            text = json.loads(call.function.arguments).get("text", text)  # type: ignore[union-attr]
        await client.chat_postMessage(channel=event["channel"], thread_ts=event["ts"], text=text or "ok")

    return app


async def main(mode: str) -> None:
    app = build(mode)
    web_app = app.web_app(path="/slack/events")

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    web_app.router.add_get("/healthz", healthz)
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
