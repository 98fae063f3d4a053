"""An approval card Slack will not take (not_in_channel, is_archived) or refuses for good (its blocks, the
token) ends the gated call, not the task: it is settled once, never posted again by each sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import scripted
from tests.test_approvals import ReactScript, _agent_file, _cards, _settle
from threadbound_emulator import FakeSlack


@pytest.mark.parametrize(
    "error",
    [
        "not_in_channel",
        "is_archived",
        "invalid_blocks",
        "msg_blocks_too_long",
        "invalid_auth",
        "token_revoked",
    ],
)
async def test_a_card_that_cannot_be_posted_fails_the_call_and_the_task_goes_on(
    slack: FakeSlack, tmp_path: Path, error: str
) -> None:
    """The card's post is refused for good: the gated call ends as failed with a result saying why,
    the model answers with it, and nothing waits for a card that will never exist."""
    script = ReactScript()
    slack.fail("chat.postMessage", error)
    agent = _agent_file(tmp_path, ["channel_react"])
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, agent_file=agent) as app:
        root = slack.add_message("C1", "<@UBOT> please react", user="U1")
        await app.deliver(events.app_mention("C1", "U1", "<@UBOT> please react", root))
        await _settle(app)
        await _settle(app)
        assert app.service is not None
        assert not await app.service.store.has_open_approval(await _task(app, root))
    [[result]] = script.results
    assert result["error"]["code"] == "tool_failed"
    assert "could not be posted" in result["error"]["message"]
    assert _cards(slack) == [] and slack.count("reactions.add") == 0
    assert [m["text"] for m in slack.bot_messages("C1")] == ["outcome: tool_failed"]


async def _task(app: AppHarness, root: str) -> str:
    assert app.service is not None
    task_id = await app.service.store.find_task("C1", root)
    assert task_id is not None
    return task_id
