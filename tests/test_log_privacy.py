"""No message text in any log line unless LOG_PREVIEWS is on (it is off by default): not from
threadbound, not from the Slack SDK's Socket Mode client or Bolt, not at LOG_LEVEL=DEBUG."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from app import logs
from app.settings import Settings
from tests.support import events
from tests.support.harness import SIGNING_SECRET, AppHarness, settings_for
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

CANARY = "canary-7f3a the quarterly numbers are secret"
#: The answer is message text too.
ANSWER = "noted: canary-b2e9 stays between us"


def answer(turn: Turn) -> list[Any]:
    return [call("channel_reply", text=ANSWER)] if turn.step == 0 else [""]


def clicked_on(ts: str) -> dict[str, Any]:
    """A click on a button of a message whose text (as Slack sends it along) is the canary."""
    payload = events.block_actions(
        channel="C1", user="U1", message_ts=ts, action_id="other_app_button", value="x"
    )
    payload["message"]["text"] = CANARY
    return payload


def test_log_previews_default_off() -> None:
    """LOG_PREVIEWS is off unless set."""
    assert Settings(_env_file=None).log_previews is False  # type: ignore[call-arg]


async def test_a_socket_mode_message_at_debug_leaves_no_text_in_the_logs(tmp_path: Path) -> None:
    """LOG_LEVEL=DEBUG in Socket Mode, previews off: the delivery is logged (by its envelope), its
    text nowhere, though the SDK's client sees the whole envelope."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        settings = settings_for(slack, tmp_path / "data", log_level="DEBUG")
        with logs.capture(settings) as captured:
            async with AppHarness(
                slack, model=scripted(answer), data_dir=tmp_path / "data", socket_mode=True, log_level="DEBUG"
            ) as app:
                text = f"<@UBOT> {CANARY}"
                root = slack.add_message("C1", text, user="U1")
                envelope = events.over_socket(slack, events.app_mention("C1", "U1", text, root))
                async with asyncio.timeout(10):
                    await slack.socket.wait_acked(envelope)
                await app.idle()
                click = events.over_socket(slack, clicked_on(root))
                async with asyncio.timeout(10):
                    await slack.socket.wait_acked(click)
        assert [m["text"] for m in slack.bot_messages("C1")] == [ANSWER]
    assert any(line.get("envelope_id") == envelope.envelope_id for line in captured.lines())
    assert "canary-7f3a" not in captured.text and "canary-b2e9" not in captured.text


async def test_an_http_message_at_debug_shows_text_only_as_a_preview_when_asked(tmp_path: Path) -> None:
    """Over HTTP at DEBUG: no text with previews off; with LOG_PREVIEWS on, only the short preview."""
    for previews in (False, True):
        async with FakeSlack() as slack:
            slack.add_channel("C1", "general")
            slack.add_user("U1", "alice", display_name="Alice")
            data_dir = tmp_path / f"data-{previews}"
            settings = settings_for(slack, data_dir, log_level="DEBUG", log_previews=previews)
            with logs.capture(settings) as captured:
                async with AppHarness(
                    slack, model=scripted(answer), data_dir=data_dir, log_level="DEBUG", log_previews=previews
                ) as app:
                    text = f"<@UBOT> {CANARY} and more words past the preview's forty characters"
                    root = slack.add_message("C1", text, user="U1")
                    await app.deliver(events.app_mention("C1", "U1", text, root))
                    await app.idle()
                    async with aiohttp.ClientSession() as http:
                        url = f"{app.url}/slack/events"
                        response = await events.deliver_interaction(
                            http, url, clicked_on(root), SIGNING_SECRET
                        )
                    assert response.status == 200
        previewed = [line["preview"] for line in captured.lines() if "preview" in line]
        if previews:
            assert previewed and all(len(p) <= logs.PREVIEW_CHARS for p in previewed)
            assert "past the preview" not in captured.text
        else:
            assert previewed == [] and "canary-7f3a" not in captured.text
        assert "canary-b2e9" not in captured.text
