"""A message edited to mention the bot starts one turn, whichever of Slack's two events arrive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack


@pytest.mark.parametrize("which", ["app_mention", "message_changed", "both", "both_reversed"])
async def test_an_edit_adding_the_mention_starts_one_turn(tmp_path: Path, which: str) -> None:
    """The app_mention (carrying ``edited``) alone, the message_changed alone, or both in either order:
    the edited message is answered exactly once."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text="On it.")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        ts = slack.add_message("C1", "<@UBOT> can you look?", user="U1")
        mention = events.app_mention("C1", "U1", "<@UBOT> can you look?", ts)
        mention["event"]["edited"] = {"user": "U1", "ts": ts}
        changed = events.message_changed(
            "C1", "U1", "<@UBOT> can you look?", ts, previous_text="can you look?"
        )
        deliveries = {
            "app_mention": [mention],
            "message_changed": [changed],
            "both": [mention, changed],
            "both_reversed": [changed, mention],
        }[which]
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            for envelope in deliveries:
                assert (await app.deliver(envelope)).status == 200
            await app.idle()
        assert len(prompts) == 1
        assert [m["text"] for m in slack.bot_messages("C1")] == ["On it."]
