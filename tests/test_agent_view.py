"""Slack's agent messaging experience: manifest events, suggested prompts from agent.toml, thread titles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.agent.agent_file import AgentFile
from app.ops.manifest import AGENT_VIEW_EVENTS, build_manifest
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

URL = "https://bot.example.com/slack/events"


def test_agent_view_manifest_subscribes_to_its_events_and_the_plain_one_does_not() -> None:
    """--agent-view adds assistant_thread_started; app_home_opened (the Home tab) is in every install,
    once."""
    plain = build_manifest(URL)["settings"]["event_subscriptions"]["bot_events"]
    agent = build_manifest(URL, agent_view=True)["settings"]["event_subscriptions"]["bot_events"]
    assert set(AGENT_VIEW_EVENTS) & set(plain) == {"app_home_opened"}
    assert agent == [*plain, "assistant_thread_started"]


def test_prompts_are_read_and_checked(tmp_path: Path) -> None:
    """prompts is a list of at most four short strings; anything else stops start-up naming the key."""
    good = tmp_path / "agent.toml"
    good.write_text('prompts = ["Summarise this thread", "What is open?"]\n')
    assert AgentFile.load(good).prompts == ("Summarise this thread", "What is open?")
    for body in ('prompts = "one"\n', "prompts = [1]\n", 'prompts = ["a", "b", "c", "d", "e"]\n'):
        bad = tmp_path / "bad.toml"
        bad.write_text(body)
        with pytest.raises(ValueError, match="prompts must be"):
            AgentFile.load(bad)


async def test_a_new_agent_thread_gets_the_suggested_prompts(tmp_path: Path) -> None:
    """assistant_thread_started: setSuggestedPrompts with the file's prompts; app_home_opened: nothing."""
    agent = tmp_path / "agent.toml"
    agent.write_text('prompts = ["Summarise this thread"]\n')
    async with FakeSlack() as slack:
        slack.add_channel("D1", "dm", is_im=True, user="U1")
        model = scripted(lambda t: [""])
        async with AppHarness(slack, model=model, data_dir=tmp_path / "data", agent_file=agent) as app:
            started = {
                "type": "assistant_thread_started",
                "assistant_thread": {"user_id": "U1", "channel_id": "D1", "thread_ts": "1700000000.000100"},
                "event_ts": "1700000000.000200",
            }
            assert (await app.deliver(events.event_callback(started))).status == 200
            opened = {"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "messages"}
            assert (await app.deliver(events.event_callback(opened))).status == 200
            await app.idle()
    assert slack.suggested_prompts == [
        ("D1", "1700000000.000100", [{"title": "Summarise this thread", "message": "Summarise this thread"}])
    ]
    assert slack.count("chat.postMessage") == 0 and slack.count("chat.startStream") == 0


async def test_a_dm_thread_is_titled_after_its_first_message(tmp_path: Path) -> None:
    """The first run of a DM thread sets its title from the first message; later runs do not."""

    def script(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="sure")] if turn.prompt else [""]

    async with FakeSlack() as slack:
        slack.add_channel("D1", "dm", is_im=True, user="U1")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = slack.add_message("D1", "anchor", user="U1")
            for text in ("Plan the Q3 launch checklist with the QA dates", "and the owners?"):
                ts = slack.add_message("D1", text, user="U1", thread_ts=root)
                envelope = events.message("D1", "U1", text, ts, thread_ts=root, channel_type="im")
                assert (await app.deliver(envelope)).status == 200
                await app.idle()
            assert app.service is not None and app.service.agent_view is not None
            await app.service.agent_view.close()
    assert [t for _, _, t in slack.titles] == ["Plan the Q3 launch checklist with the QA dates"]
