"""The ways in beside messages, end to end against the emulator over HTTP and Socket Mode: the message
shortcut "Ask threadbound", the slash command's subcommands, the App Home tab."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from app.intake.personal_blocks import CANCEL_FOLLOW_UP
from app.intake.shortcuts import ASK
from channel import follow_ups as fu
from storage.base import FollowUpRecord
from tests.support import events
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import call
from tests.support.process import ServerProcess, server_env
from tests.support.prompts import rows
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack
from threadbound_emulator import events as emulated

WITHIN = 10.0
USAGE = RequestUsage(input_tokens=100, output_tokens=20)

#: Each test runs over HTTP and over Socket Mode.
both = pytest.mark.parametrize("socket_mode", [False, True], ids=["http", "socket"])


def answering(prompts: list[str]) -> FunctionModel:
    """Answers each prompt with one channel_reply, reporting ``USAGE`` per request; keeps the prompts."""

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        asked = (
            [p for p in last.parts if isinstance(p, UserPromptPart)] if isinstance(last, ModelRequest) else []
        )
        if asked:
            prompts.append(" ".join(str(p.content) for p in asked))
            return ModelResponse(parts=[call("channel_reply", text="on it")], usage=USAGE)
        return ModelResponse(parts=[TextPart("")], usage=USAGE)

    return FunctionModel(fn)


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    slack.add_user("U2", "bob", display_name="Bob")


async def _send(app: AppHarness, body: dict[str, Any], socket_mode: bool) -> Any:
    """Deliver an event, interaction or slash command as Slack would; a slash command's answer back."""
    if socket_mode:
        envelope = emulated.over_socket(app.slack.socket, body)
        async with asyncio.timeout(WITHIN):
            await app.slack.socket.wait_acked(envelope)
        return envelope.ack_payload
    if body.get("type") == "event_callback":
        response = await app.deliver(body)
    elif "command" in body:
        raw, headers = emulated.command_body(body, SIGNING_SECRET)
        response = await app.post_raw(raw, headers)
        assert response.status == 200
        return await response.json()
    else:
        response = await app.click(body)
    assert response.status == 200
    return None


async def _command(app: AppHarness, user: str, text: str, socket_mode: bool) -> dict[str, Any]:
    payload = emulated.slash_command(app.slack, "C1", user, text, response_url=app.slack.response_url())
    answer = await _send(app, payload, socket_mode)
    assert isinstance(answer, dict)
    assert answer["response_type"] == "ephemeral"
    return answer


async def _mention(app: AppHarness, user: str, text: str, socket_mode: bool) -> str:
    ts = app.slack.add_message("C1", f"<@UBOT> {text}", user=user)
    await _send(app, events.app_mention("C1", user, f"<@UBOT> {text}", ts), socket_mode)
    await app.idle()
    return ts


async def _follow_up(app: AppHarness, root: str, requester: str, note: str) -> FollowUpRecord:
    store = app.service.store if app.service is not None else None
    assert store is not None
    task_id = await store.find_task("C1", root)
    assert task_id is not None
    now = time.time()
    record = FollowUpRecord(
        follow_up=fu.new_follow_up_handle(),
        task_id=task_id,
        requester=requester,
        channel="C1",
        thread_ts=root,
        note=note,
        due_at=now + 86400,
        created_at=now,
    )
    assert await store.schedule_follow_up(
        record, payload=fu.payload(record), per_task=10, install_max=100
    ) == ("scheduled")
    return record


def _texts(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(
        str(b.get("text", {}).get("text", "")) for b in blocks if isinstance(b.get("text"), dict)
    )


def _cancel_buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        str(b["accessory"]["value"])
        for b in blocks
        if isinstance(b.get("accessory"), dict) and b["accessory"].get("action_id") == CANCEL_FOLLOW_UP
    ]


# -- the message shortcut ------------------------------------------------------------------------


@both
async def test_a_shortcut_starts_a_task_on_the_message_with_it_in_view(
    tmp_path: Path, socket_mode: bool
) -> None:
    """Alice uses "Ask threadbound" on Bob's message (no mention): the shortcut is acknowledged, a
    task starts in that message's thread, and the model sees Alice asking about Bob's message by
    its handle. The same payload delivered again is no second turn."""
    prompts: list[str] = []
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(
            slack, model=answering(prompts), data_dir=tmp_path, socket_mode=socket_mode, stream="off"
        ) as app:
            ts = slack.add_message("C1", "the deploy failed with exit 137", user="U2")
            payload = emulated.message_action(slack, "C1", ts, "U1", callback_id=ASK)
            await _send(app, payload, socket_mode)
            await app.idle()
            await _send(app, payload, socket_mode)  # delivered twice: one claim
            await app.idle()
        [reply] = [m for m in slack.bot_messages("C1") if m.get("thread_ts") == ts]
        assert reply["text"] == "on it"
        [prompt] = prompts
        [row] = rows(prompt)
        assert row["author"] == "Alice"  # her display name, as the model sees people elsewhere
        about = row["asked_about"]
        assert about["author"] == "Bob" and about["text"] == "the deploy failed with exit 137"
        assert about["message"].startswith("msg_")


@both
async def test_a_shortcut_follows_the_mention_rules(tmp_path: Path, socket_mode: bool) -> None:
    """Outside ALLOWED_USERS the shortcut starts nothing, and the person is told why privately
    through its response_url."""
    prompts: list[str] = []
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(
            slack,
            model=answering(prompts),
            data_dir=tmp_path,
            socket_mode=socket_mode,
            stream="off",
            allowed_users=("U2",),
        ) as app:
            ts = slack.add_message("C1", "something", user="U2")
            url = slack.response_url()
            await _send(
                app,
                emulated.message_action(slack, "C1", ts, "U1", callback_id=ASK, response_url=url),
                socket_mode,
            )
            assert app.service is not None and app.service.shortcuts is not None
            await app.service.shortcuts.idle()
            await app.idle()
        assert prompts == [] and slack.bot_messages("C1") == []
        [note] = slack.responses_to(url)
        assert "ALLOWED_USERS" in note["text"] and note["response_type"] == "ephemeral"


# -- the slash command -----------------------------------------------------------------------------


@both
async def test_each_subcommand_answers_privately(tmp_path: Path, socket_mode: bool) -> None:
    """help lists the subcommands; usage shows the person's tokens today against their budget;
    follow-ups lists only theirs, each with a Cancel button that cancels it (someone else's click
    does not) and redraws the answer through its response_url; an unknown word gets the help."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(
            slack,
            model=answering([]),
            data_dir=tmp_path,
            socket_mode=socket_mode,
            stream="off",
            user_daily_token_budget=10_000,
        ) as app:
            helped = await _command(app, "U1", "help", socket_mode)
            for name in ("/threadbound help", "/threadbound usage", "/threadbound follow-ups"):
                assert name in helped["text"]
            assert (
                "I don't know `frobnicate`" in (await _command(app, "U1", "frobnicate", socket_mode))["text"]
            )

            root = await _mention(app, "U1", "hello", socket_mode)
            usage = await _command(app, "U1", "usage", socket_mode)
            assert "240 tokens today" in usage["text"] and "of your 10,000; 9,760 left" in usage["text"]
            # The test's model has no list price: its tokens are said unpriced, never guessed.
            assert "plus 240 tokens of models with no known price" in usage["text"]
            assert "You have used 0 tokens today" in (await _command(app, "U2", "usage", socket_mode))["text"]

            mine = await _follow_up(app, root, "U1", "check the deploy again")
            theirs = await _follow_up(app, root, "U2", "bob's reminder")
            answer = await _command(app, "U1", "follow-ups", socket_mode)
            assert "check the deploy again" in _texts(answer["blocks"])
            assert "bob's reminder" not in _texts(answer["blocks"])
            [value] = _cancel_buttons(answer["blocks"])

            store = app.service.store if app.service is not None else None
            assert store is not None and app.service is not None and app.service.home is not None
            url = slack.response_url()
            await _send(app, _cancel_click("U2", value, url), socket_mode)  # not Bob's to cancel
            await app.service.home.idle()
            assert (await store.get_follow_up(mine.task_id, mine.follow_up)).state == "pending"  # type: ignore[union-attr]
            await _send(app, _cancel_click("U1", value, url), socket_mode)
            await app.service.home.idle()
            assert (await store.get_follow_up(mine.task_id, mine.follow_up)).state == "cancelled"  # type: ignore[union-attr]
            assert (await store.get_follow_up(theirs.task_id, theirs.follow_up)).state == "pending"  # type: ignore[union-attr]
            redrawn = slack.responses_to(url)[-1]
            assert redrawn["replace_original"] is True and _cancel_buttons(redrawn["blocks"]) == []
            assert "You have 0 pending follow-ups" in redrawn["text"]


def _cancel_click(user: str, value: str, response_url: str) -> dict[str, Any]:
    """A click on a Cancel button of the slash command's private answer."""
    return {
        "type": "block_actions",
        "user": {"id": user, "name": user.lower(), "team_id": "T1"},
        "team": {"id": "T1"},
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": "C1", "is_ephemeral": True},
        "channel": {"id": "C1"},
        "response_url": response_url,
        "trigger_id": "1.2.trigger",
        "actions": [
            {
                "action_id": CANCEL_FOLLOW_UP,
                "block_id": "follow_up",
                "type": "button",
                "value": value,
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


# -- the App Home tab ------------------------------------------------------------------------------


@both
async def test_the_home_tab_shows_each_person_only_their_own(tmp_path: Path, socket_mode: bool) -> None:
    """Alice and Bob each open the Home tab: each sees their own tasks (linked), follow-ups (with
    Cancel) and budget, never the other's; it is drawn again on every opening, and a Cancel
    clicked there cancels and redraws it."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(
            slack,
            model=answering([]),
            data_dir=tmp_path,
            socket_mode=socket_mode,
            stream="off",
            user_daily_token_budget=5_000,
        ) as app:
            assert app.service is not None and app.service.home is not None
            home = app.service.home
            alice_root = await _mention(app, "U1", "alice's question", socket_mode)
            bob_root = await _mention(app, "U2", "bob's question", socket_mode)
            await _follow_up(app, alice_root, "U1", "alice's reminder")
            await _follow_up(app, bob_root, "U2", "bob's reminder")
            for user in ("U1", "U2"):
                await _send(app, emulated.app_home_opened(slack, user), socket_mode)
            await home.idle()
            alice, bob = (_texts(slack.home_views[u]["blocks"]) for u in ("U1", "U2"))
            assert "alice's reminder" in alice and "bob's reminder" not in alice
            assert "bob's reminder" in bob and "alice's reminder" not in bob
            assert f"p{alice_root.replace('.', '')}" in alice and f"p{bob_root.replace('.', '')}" not in alice
            assert f"p{bob_root.replace('.', '')}" in bob and f"p{alice_root.replace('.', '')}" not in bob
            assert "of your 5,000" in alice and "240 tokens today" in alice

            [value] = _cancel_buttons(slack.home_views["U1"]["blocks"])
            click = _cancel_click("U1", value, "")
            click["container"] = {"type": "view", "view_id": "V1"}
            del click["channel"]
            await _send(app, click, socket_mode)
            await home.idle()
            assert "alice's reminder" not in _texts(slack.home_views["U1"]["blocks"])
            published = slack.count("views.publish")
            await _send(app, emulated.app_home_opened(slack, "U2"), socket_mode)
            await home.idle()
            assert slack.count("views.publish") == published + 1
            await _send(app, emulated.app_home_opened(slack, "U2", tab="messages"), socket_mode)
            await home.idle()
            assert slack.count("views.publish") == published + 1


@pytest.mark.process
async def test_the_ways_in_reach_the_service_through_the_edge_process(tmp_path: Path) -> None:
    """Under `serve` the HTTP edge runs in a process of its own and hands everything but events to
    the service: a slash command's private answer, a shortcut's task and a Home tab all come back."""
    async with FakeSlack() as slack, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"))
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "serve.log") as server:
            url = f"{server.url}/slack/events"
            payload = emulated.slash_command(slack, "C1", "U1", "help")
            body, headers = emulated.command_body(payload, SIGNING_SECRET)
            async with http.post(url, data=body, headers=headers) as answered:
                assert answered.status == 200
                answer = await answered.json()
            assert answer["response_type"] == "ephemeral" and "/threadbound usage" in answer["text"]

            ts = slack.add_message("C1", "what does exit 137 mean?", user="U2")
            shortcut = emulated.message_action(slack, "C1", ts, "U1", callback_id=ASK)
            clicked = await events.deliver_interaction(http, url, shortcut, SIGNING_SECRET)
            assert clicked.status == 200
            await eventually(lambda: any(m.get("thread_ts") == ts for m in slack.bot_messages("C1")))

            opened = await events.deliver(http, url, emulated.app_home_opened(slack, "U1"), SIGNING_SECRET)
            assert opened.status == 200
            await eventually(lambda: "U1" in slack.home_views)
            assert "Your tasks" in json.dumps(slack.home_views["U1"])
