"""Clicks are answered before Slack is called, and a click nothing can handle is never ignored silently."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.agent.approval_cards import APPROVE
from storage.base import StoreError
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import scripted
from tests.test_approvals import ReactScript, _agent_file, _ask, _cards, _click, _settle
from threadbound_emulator import FakeSlack

#: Generous: a click answered only after a held Slack call would wait here forever.
NOT_ANSWERED = 20.0


async def test_a_refused_approval_click_is_answered_before_the_private_note_is_sent(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Someone who may not decide clicks: Slack gets its 200 while the private note (chat.postEphemeral)
    is still on its way, and the note arrives after."""
    agent = _agent_file(tmp_path, ["channel_react"])
    async with AppHarness(slack, model=scripted(ReactScript()), data_dir=tmp_path, agent_file=agent) as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        held = slack.hold("chat.postEphemeral")
        response = await asyncio.wait_for(app.click(_click(card, "U2", APPROVE, root)), NOT_ANSWERED)
        assert response.status == 200
        await asyncio.wait_for(held.wait(), NOT_ANSWERED)
        slack.release("chat.postEphemeral")
        await _settle(app)
    assert slack.ephemerals and slack.ephemerals[0][1] == "U2"


async def test_a_feedback_click_by_someone_unknown_is_answered_before_any_name_look_up(
    slack: FakeSlack,
    tmp_path: Path,
) -> None:
    """A feedback click by a person not looked up yet is answered without waiting for users.info; it is
    stored once the look-up (whether they are a guest, and their name) answers."""
    async with AppHarness(slack, model=scripted(lambda turn: [""]), data_dir=tmp_path) as app:
        assert app.service is not None
        task = await app.service.store.create_task(channel="C1", thread_ts="1.0", now=0.0)
        await app.service.store.mint_handle(
            task_id=task.task_id, kind="msg", ref="C1:2.0", handle="msg_answer", authored=True
        )
        slack.hold("users.info")
        click = events.block_actions(
            channel="C1",
            user="U9",
            message_ts="2.0",
            thread_ts="1.0",
            action_id="threadbound_feedback",
            value=f"positive:{task.task_id}",
            element="feedback_buttons",
            user_name="olga",
        )
        response = await asyncio.wait_for(app.click(click), NOT_ANSWERED)
        assert response.status == 200
        assert await app.service.store.pending_feedback(task.task_id) == []  # not admitted yet
        slack.release("users.info")
        await app.service.interactions.idle()
        [record] = await app.service.store.pending_feedback(task.task_id)
        assert record.user_name.lower() == "olga"


async def test_a_click_on_our_button_that_nothing_handles_tells_the_clicker(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """A click on a threadbound button this instance does not handle (another version in a rolling
    deploy) is logged and the clicker told privately, not ignored silently."""
    async with AppHarness(slack, model=scripted(lambda turn: [""]), data_dir=tmp_path) as app:
        click = events.block_actions(
            channel="C1", user="U1", message_ts="2.0", action_id="threadbound_from_the_future", value="x"
        )
        assert (await app.click(click)).status == 200
        await _settle(app)
    assert [e[1] for e in slack.ephemerals] == ["U1"]
    assert "again" in slack.ephemerals[0][3]


async def test_an_approval_click_the_store_cannot_read_tells_the_clicker(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that cannot read approvals (a schema from before approvals in a rolling deploy) makes the
    click answer 200 and tells the clicker to click again; nothing silently ignored."""
    agent = _agent_file(tmp_path, ["channel_react"])
    async with AppHarness(slack, model=scripted(ReactScript()), data_dir=tmp_path, agent_file=agent) as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        assert app.service is not None

        async def broken(approval_id: str) -> None:
            raise StoreError('relation "approvals" does not exist')

        monkeypatch.setattr(app.service.store, "get_approval", broken)
        assert (await app.click(_click(card, "U1", APPROVE, root))).status == 200
        await _settle(app)
    assert [e[1] for e in slack.ephemerals] == ["U1"]
    assert "click again" in slack.ephemerals[0][3]
