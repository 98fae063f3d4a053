"""The emulator's faults for the fault schedule: a write applied late after its connection was cut,
applied and answered 5xx, applied and dropped; and Slack's event deliveries retried and duplicated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from tests.support.deliveries import Deliverer
from threadbound_emulator import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.add_channel("C1", "general")
        yield fake


def _client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.token, base_url=slack.api_url, retry_handlers=[])


async def test_a_late_write_is_cut_off_at_once_and_applied_after(slack: FakeSlack) -> None:
    """late(): the caller's connection is cut with nothing done; the post appears ``seconds`` later,
    once, and ``settle_late`` waits for it."""
    slack.late("chat.postMessage", 0.3)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await _client(slack).chat_postMessage(channel="C1", text="later")
    assert slack.bot_messages("C1") == [] and slack.pending_late == 1
    await asyncio.sleep(0.1)
    assert slack.bot_messages("C1") == []
    await asyncio.wait_for(slack.settle_late(), 5)
    assert [m["text"] for m in slack.bot_messages("C1")] == ["later"]
    assert [c.method for c in slack.applied_late] == ["chat.postMessage"]
    assert slack.applied_late[0].response is not None and slack.applied_late[0].response["ok"]
    await _client(slack).chat_postMessage(channel="C1", text="now")  # the fault was used up
    assert [m["text"] for m in slack.bot_messages("C1")] == ["later", "now"]


async def test_a_late_write_not_yet_applied_is_forgotten_at_stop() -> None:
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.late("chat.postMessage", 30)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await _client(slack).chat_postMessage(channel="C1", text="never")
    assert slack.pending_late == 0 and slack.bot_messages("C1") == []


async def test_applied_and_answered_5xx_or_dropped(slack: FakeSlack) -> None:
    """An ambiguous write both ways: the work done, the answer a 500 or no answer at all."""
    slack.fail("chat.postMessage", "internal_error", status=500, applied=True)
    slack.drop("chat.postMessage")
    client = _client(slack)
    with pytest.raises(Exception):  # noqa: B017 - slack_sdk raises its own error for a 500
        await client.chat_postMessage(channel="C1", text="one")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.chat_postMessage(channel="C1", text="two")
    assert [m["text"] for m in slack.bot_messages("C1")] == ["one", "two"]


async def test_a_delivery_is_retried_on_another_instance_and_duplicated() -> None:
    """The deliverer retries a refused delivery on the next instance, and sends a duplicate after
    the acknowledgement with Slack's retry header."""
    seen: list[tuple[str, str | None]] = []
    name_key = web.AppKey("name", str)

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.app[name_key], request.headers.get("X-Slack-Retry-Num")))
        return web.Response(status=500 if request.app[name_key] == "down" else 200)

    runners = []
    urls = []
    for name in ("down", "up"):
        app = web.Application()
        app[name_key] = name
        app.router.add_post("/slack/events", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
    picks = iter([0, 1, 1])
    try:
        async with aiohttp.ClientSession() as http:
            deliverer = Deliverer(http, lambda: urls, lambda n: next(picks))
            delivery = deliverer.send({"type": "event_callback", "event_id": "Ev1"}, duplicate_after=0.05)
            await asyncio.wait_for(deliverer.settle(), 10)
    finally:
        for runner in runners:
            await runner.cleanup()
    assert delivery.acked
    assert seen == [("down", None), ("up", "1"), ("up", "1")]
