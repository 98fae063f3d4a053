"""End-to-end: signed Slack events over real HTTP → task → replies the fake Slack received."""

from __future__ import annotations

from pathlib import Path

from testing import events
from testing.fake_slack import FakeSlack
from testing.harness import AppHarness
from testing.models import echo_model


async def test_mention_gets_an_answer_in_its_thread(tmp_path: Path) -> None:
    """An app_mention in a channel is answered in that message's thread."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        ts = slack.add_message("C1", "<@UBOT> hello there", user="U1")
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello there", ts))
            assert response.status == 200
            await app.idle()
        replies = slack.bot_messages("C1")
        assert len(replies) == 1
        assert replies[0]["thread_ts"] == ts
        assert "echo: Alice" in replies[0]["text"]
        assert "@threadbound hello there" in replies[0]["text"]
