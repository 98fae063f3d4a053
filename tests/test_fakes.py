"""Tests of the test doubles themselves: FakeSlack, FakeOpenAI and the Events API helpers."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests.support import FakeOpenAI, events
from tests.support.fake_model import Reply
from threadbound_emulator import FakeSlack

SECRET = "shhh"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(token="xoxb-test") as fake:
        fake.add_user("U1", "alice", display_name="Alice", real_name="Alice A")
        fake.add_channel("C1", "general")
        fake.add_channel("D1", "", is_im=True, user="U1")
        yield fake


@pytest.fixture
async def client(slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    web_client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
    yield web_client


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# --------------------------------------------------------------------------- FakeSlack: API


async def test_auth_test_reports_bot_identity_and_scopes(slack: FakeSlack, client: AsyncWebClient) -> None:
    """auth.test answers the bot identity and the granted scopes in x-oauth-scopes."""
    resp = await client.auth_test()
    assert (resp["user_id"], resp["bot_id"], resp["team_id"]) == ("UBOT", "BBOT", "T1")
    scopes = resp.headers["x-oauth-scopes"].split(",")
    assert "canvases:write" in scopes and "chat:write" in scopes and "files:read" in scopes
    assert slack.count("auth.test") == 1


async def test_another_install_identity_reaches_auth_test_and_socket_mode() -> None:
    """FakeSlack takes the workspace's identity keywords: auth.test and Socket Mode's app id use them."""
    async with FakeSlack(bot_user_id="U9", bot_id="B9", team_id="T9", app_id="A9", bot_name="helper") as fake:
        resp = await AsyncWebClient(token="xoxb-test", base_url=fake.api_url).auth_test()
        identity = (resp["user_id"], resp["bot_id"], resp["team_id"], resp["user"])
        assert identity == ("U9", "B9", "T9", "helper")
        assert fake.socket.app_id == "A9"


async def test_wrong_token_is_invalid_auth(slack: FakeSlack) -> None:
    """A call with the wrong bearer token fails with invalid_auth."""
    bad = AsyncWebClient(token="xoxb-wrong", base_url=slack.api_url)
    with pytest.raises(SlackApiError) as err:
        await bad.auth_test()
    assert err.value.response["error"] == "invalid_auth"


async def test_unknown_method(client: AsyncWebClient) -> None:
    """A method the fake does not know answers unknown_method."""
    with pytest.raises(SlackApiError) as err:
        await client.api_call("chat.doesNotExist")
    assert err.value.response["error"] == "unknown_method"


async def test_post_stores_message_with_metadata(slack: FakeSlack, client: AsyncWebClient) -> None:
    """chat.postMessage stores blocks and metadata, shown by replies only with include_all_metadata."""
    root = slack.add_message("C1", "hi <@UBOT>", "U1")
    meta = {"event_type": "threadbound_effect", "event_payload": {"effect": "e1"}}
    blocks = [{"type": "markdown", "text": "**hello**"}]
    resp = await client.chat_postMessage(
        channel="C1", text="hello", blocks=blocks, thread_ts=root, metadata=meta
    )
    assert resp["message"]["bot_id"] == "BBOT" and resp["message"]["thread_ts"] == root
    assert float(resp["ts"]) > float(root)
    plain = await client.conversations_replies(channel="C1", ts=root)
    assert [m["ts"] for m in plain["messages"]] == [root, resp["ts"]]
    assert "metadata" not in plain["messages"][1]
    with_meta = await client.conversations_replies(channel="C1", ts=root, include_all_metadata=True)
    assert with_meta["messages"][1]["metadata"] == meta
    assert with_meta["messages"][1]["blocks"] == blocks
    assert slack.messages("C1", root)[1]["text"] == "hello"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"channel": "C404", "text": "x"}, "channel_not_found"),
        ({"channel": "C1", "text": "x", "blocks": [{"type": "divider"}] * 51}, "invalid_blocks"),
        (
            {"channel": "C1", "text": "x", "blocks": [{"type": "markdown", "text": "a" * 6001}] * 2},
            "msg_blocks_too_long",
        ),
        pytest.param(
            {"channel": "C1", "text": ""},
            "no_text",
            marks=pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing"),
        ),
        ({"channel": "C1", "text": "x", "thread_ts": "1600000000.000001"}, "thread_not_found"),
    ],
)
async def test_post_validation(client: AsyncWebClient, kwargs: dict[str, object], error: str) -> None:
    """chat.postMessage refuses what Slack refuses, with Slack's error codes."""
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(**kwargs)  # type: ignore[arg-type]
    assert err.value.response["error"] == error


async def test_replies_paginate_with_cursor(slack: FakeSlack, client: AsyncWebClient) -> None:
    """conversations.replies pages root-first, oldest first, through next_cursor."""
    root = slack.add_message("C1", "root", "U1")
    replies = [slack.add_message("C1", f"r{i}", "U1", thread_ts=root) for i in range(5)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        resp = await client.conversations_replies(channel="C1", ts=root, limit=2, cursor=cursor)
        pages += 1
        seen += [m["ts"] for m in resp["messages"]]
        cursor = resp["response_metadata"]["next_cursor"]
        assert resp["has_more"] == bool(cursor)
        if not cursor:
            break
    assert seen == [root, *replies] and pages == 3
    with pytest.raises(SlackApiError) as err:
        await client.conversations_replies(channel="C1", ts="1600000000.000001")
    assert err.value.response["error"] == "thread_not_found"


async def test_history_newest_first(slack: FakeSlack, client: AsyncWebClient) -> None:
    """conversations.history lists top-level messages newest first, paginated."""
    tops = [slack.add_message("C1", f"m{i}", "U1") for i in range(4)]
    slack.add_message("C1", "reply", "U1", thread_ts=tops[0])
    first = await client.conversations_history(channel="C1", limit=3)
    assert [m["ts"] for m in first["messages"]] == tops[::-1][:3] and first["has_more"]
    rest = await client.conversations_history(channel="C1", cursor=first["response_metadata"]["next_cursor"])
    assert [m["ts"] for m in rest["messages"]] == [tops[0]] and not rest["has_more"]
    assert rest["messages"][0]["reply_count"] == 1


async def test_info_lookups(slack: FakeSlack, client: AsyncWebClient) -> None:
    """conversations.info, users.info and chat.getPermalink answer from workspace state."""
    im = await client.conversations_info(channel="D1")
    assert im["channel"]["is_im"] and im["channel"]["user"] == "U1"
    user = await client.users_info(user="U1")
    assert user["user"]["profile"]["display_name"] == "Alice"
    with pytest.raises(SlackApiError) as err:
        await client.users_info(user="U404")
    assert err.value.response["error"] == "user_not_found"
    ts = slack.add_message("C1", "x", "U1")
    link = await client.chat_getPermalink(channel="C1", message_ts=ts)
    assert link["permalink"] == f"https://fake.slack.com/archives/C1/p{ts.replace('.', '')}"


async def test_update_delete_only_own(slack: FakeSlack, client: AsyncWebClient) -> None:
    """chat.update and chat.delete work on the bot's posts and refuse others'."""
    human = slack.add_message("C1", "mine", "U1")
    own = (await client.chat_postMessage(channel="C1", text="v1"))["ts"]
    updated = await client.chat_update(channel="C1", ts=own, text="v2")
    assert updated["message"]["text"] == "v2" and "edited" in updated["message"]
    for call, code in (
        (client.chat_update, "cant_update_message"),
        (client.chat_delete, "cant_delete_message"),
    ):
        with pytest.raises(SlackApiError) as err:
            await call(channel="C1", ts=human, text="x")
        assert err.value.response["error"] == code
    await client.chat_delete(channel="C1", ts=own)
    with pytest.raises(SlackApiError) as err:
        await client.chat_delete(channel="C1", ts=own)
    assert err.value.response["error"] == "message_not_found"


async def test_reactions(slack: FakeSlack, client: AsyncWebClient) -> None:
    """reactions.add/remove track the bot's reactions and refuse duplicates and bad names."""
    ts = slack.add_message("C1", "x", "U1")
    await client.reactions_add(channel="C1", timestamp=ts, name="eyes")
    assert slack.messages("C1")[0]["reactions"] == [{"name": "eyes", "users": ["UBOT"], "count": 1}]
    cases = [
        (client.reactions_add, "eyes", ts, "already_reacted"),
        (client.reactions_add, "Bad Name", ts, "invalid_name"),
        (client.reactions_add, "eyes", "1600000000.000001", "message_not_found"),
        (client.reactions_remove, "tada", ts, "no_reaction"),
    ]
    for call, name, timestamp, code in cases:
        with pytest.raises(SlackApiError) as err:
            await call(channel="C1", timestamp=timestamp, name=name)
        assert err.value.response["error"] == code
    await client.reactions_remove(channel="C1", timestamp=ts, name="eyes")
    assert "reactions" not in slack.messages("C1")[0]


async def test_missing_scope(slack: FakeSlack) -> None:
    """A method whose scope was not granted answers missing_scope."""
    async with FakeSlack(scopes=["chat:write"]) as narrow:
        narrow.add_channel("C1", "general")
        web_client = AsyncWebClient(token="xoxb-test", base_url=narrow.api_url)
        with pytest.raises(SlackApiError) as err:
            await web_client.canvases_create(
                title="t", document_content={"type": "markdown", "markdown": "x"}
            )
        assert err.value.response["error"] == "missing_scope"
        assert err.value.response["needed"] == "canvases:write"


# --------------------------------------------------------------------------- FakeSlack: faults


async def test_rate_limit_refuses_a_second_post_in_the_same_channel_only(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """rate_limit() answers a post beyond one per second in a channel with 429 and a whole-second
    Retry-After, posts nothing for it, and leaves other channels alone."""
    slack.add_channel("C2", "random")
    limit = slack.rate_limit(per_second=1.0, burst=1)
    await client.chat_postMessage(channel="C1", text="first")
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(channel="C1", text="too soon")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "1"
    await client.chat_postMessage(channel="C2", text="elsewhere")
    assert [m["text"] for m in slack.messages("C1")] == ["first"]
    assert len(slack.messages("C2")) == 1 and limit.refused == {"C1": 1}


async def test_fail_ratelimited_then_recovers(slack: FakeSlack, client: AsyncWebClient) -> None:
    """fail() answers 429 with Retry-After once, posts nothing, then the method works again."""
    slack.fail("chat.postMessage", retry_after=7)
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(channel="C1", text="x")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "7"
    assert err.value.response["error"] == "ratelimited"
    assert slack.messages("C1") == []
    await client.chat_postMessage(channel="C1", text="x")
    assert len(slack.messages("C1")) == 1 and slack.count("chat.postMessage") == 2


async def test_fail_with_error_code(slack: FakeSlack, client: AsyncWebClient) -> None:
    """fail() with another error answers HTTP 200 with that error, for as many times as asked."""
    slack.fail("assistant.threads.setStatus", error="not_allowed", times=None)
    for _ in range(2):
        with pytest.raises(SlackApiError) as err:
            await client.assistant_threads_setStatus(channel_id="C1", thread_ts="1.000001", status="thinking")
        assert err.value.response.status_code == 200 and err.value.response["error"] == "not_allowed"
    slack.clear_faults()
    await client.assistant_threads_setStatus(channel_id="C1", thread_ts="1.000001", status="thinking")
    assert [s.status for s in slack.statuses] == ["thinking"]


async def test_drop_shows_why_writes_need_no_retry(slack: FakeSlack) -> None:
    """drop() applies the post then closes the connection; slack_sdk's default retry duplicates it."""
    default = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
    slack.drop("chat.postMessage")
    await default.chat_postMessage(channel="C1", text="once")
    assert len(slack.messages("C1")) == 2  # the hazard: one post attempt became two messages
    no_retry = AsyncWebClient(token="xoxb-test", base_url=slack.api_url, retry_handlers=[])
    slack.drop("chat.postMessage")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await no_retry.chat_postMessage(channel="C1", text="once")
    assert len(slack.messages("C1")) == 3 and slack.count("chat.postMessage") == 3


async def test_hold_and_release(slack: FakeSlack, client: AsyncWebClient) -> None:
    """hold() stores the post and keeps the answer back until release()."""
    began = slack.hold("chat.postMessage")
    task = asyncio.create_task(client.chat_postMessage(channel="C1", text="slow"))
    await asyncio.wait_for(began.wait(), 5)
    assert len(slack.messages("C1")) == 1 and not task.done()
    slack.release("chat.postMessage")
    resp = await asyncio.wait_for(task, 5)
    assert resp["ts"] == slack.messages("C1")[0]["ts"]


async def test_delay_answers_no_sooner(slack: FakeSlack, client: AsyncWebClient) -> None:
    """delay() waits before handling the next call only: the post lands, no sooner than the delay."""
    slack.delay("chat.postMessage", 0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await client.chat_postMessage(channel="C1", text="late")
    assert loop.time() - started >= 0.2
    assert len(slack.messages("C1")) == 1
    assert slack.faults.next("chat.postMessage") is None  # consumed: the next call is not delayed


async def test_wait_for_calls_and_observe(slack: FakeSlack, client: AsyncWebClient) -> None:
    """observe() sees each call as it arrives; wait_for_calls() returns once enough were handled."""
    arrived: list[str] = []
    slack.observe(lambda call: arrived.append(call.method))
    waiter = asyncio.create_task(slack.wait_for_calls("chat.postMessage", 2))
    await client.chat_postMessage(channel="C1", text="one")
    await client.reactions_add(channel="C1", timestamp=slack.messages("C1")[0]["ts"], name="eyes")
    await client.chat_postMessage(channel="C1", text="two")
    calls = await asyncio.wait_for(waiter, 5)
    assert [c.params["text"] for c in calls] == ["one", "two"] and all(c.handled for c in calls)
    assert arrived == ["chat.postMessage", "reactions.add", "chat.postMessage"]


# --------------------------------------------------------------------------- FakeSlack: files


async def test_file_download_modes(
    slack: FakeSlack, client: AsyncWebClient, http: aiohttp.ClientSession
) -> None:
    """The file host serves bytes with the token, and sign-in pages, redirects, long bodies otherwise."""
    slack.add_file("F1", "a.txt", "text/plain", b"hello file")
    slack.add_file("F2", "b.pdf", "application/pdf", b"%PDF", mode="html_signin")
    slack.add_file("F3", "c.png", "image/png", b"png", mode="redirect")
    slack.add_file("F4", "d.bin", "application/octet-stream", b"x" * 10, mode="long")
    slack.add_file("F5", "e.mov", "video/quicktime", b"small", mode="huge", mp4_low=b"low")
    auth = {"Authorization": "Bearer xoxb-test"}
    info = (await client.files_info(file="F1"))["file"]
    assert info["size"] == 10 and info["url_private"].startswith(slack.files_origin)
    async with http.get(info["url_private_download"], headers=auth) as r:
        assert r.content_type == "text/plain" and r.content_length == 10 and await r.read() == b"hello file"
    async with http.get(info["url_private"]) as r:
        assert r.status == 200 and r.content_type == "text/html"
    async with http.get(f"{slack.files_origin}/files/F2/b.pdf", headers=auth) as r:
        assert r.content_type == "text/html"
    async with http.get(f"{slack.files_origin}/files/F3/c.png", headers=auth, allow_redirects=False) as r:
        assert r.status == 302 and r.headers["Location"].startswith(slack.other_origin)
    async with http.get(f"{slack.files_origin}/files/F4/d.bin", headers=auth) as r:
        assert len(await r.read()) > (await client.files_info(file="F4"))["file"]["size"]
    huge = (await client.files_info(file="F5"))["file"]
    assert huge["size"] == 200 * 2**20
    async with http.get(huge["mp4_low"], headers=auth) as r:
        assert await r.read() == b"low"
    assert [(r.file_id, r.authorized, r.served) for r in slack.file_requests[:3]] == [
        ("F1", True, "file"),
        ("F1", False, "signin"),
        ("F2", True, "signin"),
    ]
    with pytest.raises(SlackApiError) as err:
        await client.files_info(file="F404")
    assert err.value.response["error"] == "file_not_found"


async def test_large_generated_file_streams(slack: FakeSlack, http: aiohttp.ClientSession) -> None:
    """A size-only file is served as deterministic streamed bytes matching file_sha256."""
    slack.add_file("FBIG", "big.bin", "application/octet-stream", size=20 * 2**20 + 5)
    digest = hashlib.sha256()
    total = 0
    url = f"{slack.files_origin}/files/FBIG/download/big.bin"
    async with http.get(url, headers={"Authorization": "Bearer xoxb-test"}) as r:
        assert r.content_length == 20 * 2**20 + 5
        async for chunk in r.content.iter_chunked(2**20):
            digest.update(chunk)
            total += len(chunk)
    assert total == 20 * 2**20 + 5 and digest.hexdigest() == slack.file_sha256("FBIG")


async def test_files_upload_v2_into_thread(slack: FakeSlack, client: AsyncWebClient) -> None:
    """slack_sdk's files_upload_v2 works end to end and shares the file into the thread."""
    root = slack.add_message("C1", "root", "U1")
    resp = await client.files_upload_v2(
        channel="C1", thread_ts=root, content=b"report body", filename="report.txt", title="Report"
    )
    file = resp["file"]
    assert file["title"] == "Report" and file["name"] == "report.txt" and file["size"] == 11
    assert slack.file_bytes_uploaded(file["id"]) == b"report body"
    thread = slack.messages("C1", root)
    assert len(thread) == 2 and thread[1]["files"][0]["id"] == file["id"]
    info = await client.files_info(file=file["id"])
    assert info["file"]["shares"]["public"]["C1"][0]["ts"] == thread[1]["ts"]


async def test_canvas_create_and_share(slack: FakeSlack, client: AsyncWebClient) -> None:
    """canvases.create makes a canvas that access.set shares and files.info links to."""
    resp = await client.canvases_create(
        title="Notes", document_content={"type": "markdown", "markdown": "# Hi"}
    )
    cid = resp["canvas_id"]
    await client.canvases_access_set(canvas_id=cid, access_level="read", channel_ids=["C1"])
    assert slack.canvases[cid].access == [{"access_level": "read", "channel_ids": ["C1"], "user_ids": []}]
    info = await client.files_info(file=cid)
    assert info["file"]["title"] == "Notes" and info["file"]["permalink"].startswith("https://")


# --------------------------------------------------------------------------- events


async def test_events_signed_and_delivered(http: aiohttp.ClientSession) -> None:
    """deliver() posts a signed envelope with retry headers that slack_sdk's verifier accepts."""
    seen: list[tuple[bytes, dict[str, str]]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((await request.read(), dict(request.headers)))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/slack/events", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
        env = events.app_mention("C1", "U1", "<@UBOT> hi", "1700000000.000100", thread_ts="1700000000.000050")
        resp = await events.deliver(http, url, env, SECRET, retry_num=1)
        assert resp.status == 200 and await resp.text() == "ok"
    finally:
        await runner.cleanup()
    body, headers = seen[0]
    assert SignatureVerifier(SECRET).is_valid_request(body, headers)
    assert headers["X-Slack-Retry-Num"] == "1" and headers["X-Slack-Retry-Reason"] == "http_timeout"
    sent = json.loads(body)
    assert sent["type"] == "event_callback" and sent["event"]["thread_ts"] == "1700000000.000050"
    assert sent["authorizations"][0]["user_id"] == "UBOT"
    other = events.message("D1", "U1", "hi", "1700000000.000200", channel_type="im", files=[{"id": "F1"}])
    assert other["event_id"] != sent["event_id"] and other["event"]["subtype"] == "file_share"
    assert events.url_verification("abc")["challenge"] == "abc"


# --------------------------------------------------------------------------- FakeOpenAI


async def test_fake_openai_round_trip_with_pydantic_ai() -> None:
    """A pydantic-ai Agent calls the fake model, runs the scripted tool call, and gets "done"."""
    async with FakeOpenAI() as llm, AsyncOpenAI(base_url=llm.base_url, api_key="x") as openai_client:
        provider = OpenAIProvider(openai_client=openai_client)
        model = OpenAIChatModel("fake", provider=provider)
        agent = Agent(model)
        replies: list[str] = []

        @agent.tool_plain
        def channel_reply(text: str) -> dict[str, str]:
            """Reply in the conversation."""
            replies.append(text)
            return {"message": "msg_1"}

        result = await agent.run("hello there")
        assert replies == ["echo: hello there"] and result.output == "done"
        assert llm.count == 2 and llm.requests[1]["messages"][-1]["role"] == "tool"
        assert any(t["function"]["name"] == "channel_reply" for t in llm.requests[0]["tools"])


async def test_fake_openai_streaming_and_faults() -> None:
    """Streaming answers SSE chunks pydantic-ai can assemble; fail() answers HTTP errors."""
    script = FakeOpenAI.sequence(
        [FakeOpenAI.tool_call("channel_reply", {"text": "hi"}), Reply(text="streamed text")]
    )
    async with FakeOpenAI(script) as llm, AsyncOpenAI(base_url=llm.base_url, api_key="x") as openai_client:
        provider = OpenAIProvider(openai_client=openai_client)
        model = OpenAIChatModel("fake", provider=provider)
        agent = Agent(model)
        calls: list[str] = []

        @agent.tool_plain
        def channel_reply(text: str) -> str:
            """Reply in the conversation."""
            calls.append(text)
            return "ok"

        async with agent.run_stream("go") as run:
            output = await run.get_output()
        assert calls == ["hi"] and output == "streamed text"
        assert all(r.get("stream") for r in llm.requests)
        llm.fail(status=500, times=3)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{llm.base_url}/chat/completions", json={"messages": []}) as r:
                assert r.status == 500
            async with http.get(f"{llm.base_url}/models") as r:
                assert (await r.json())["data"][0]["id"] == "fake"


async def test_fake_openai_shares_the_fault_helper() -> None:
    """FakeOpenAI's faults come from threadbound_emulator.faults: a 429 with Retry-After, then a dropped
    connection, then a normal answer, each consumed once and in order."""
    async with FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        llm.fail(status=429, retry_after=3, message="slow down")
        llm.drop()
        body = {"messages": [{"role": "user", "content": "hi"}]}
        url = f"{llm.base_url}/chat/completions"
        async with http.post(url, json=body) as r:
            assert r.status == 429 and r.headers["Retry-After"] == "3"
            assert (await r.json())["error"]["message"] == "slow down"
        with pytest.raises(aiohttp.ServerDisconnectedError):
            async with http.post(url, json=body) as r:
                await r.read()
        async with http.post(url, json=body) as r:
            assert r.status == 200
            assert (await r.json())["choices"][0]["message"]["tool_calls"]
        assert llm.count == 3
