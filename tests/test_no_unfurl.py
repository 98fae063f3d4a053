"""Slack never previews a link the model wrote: every write carrying its text turns unfurling off."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from channel.contract import Origin, StreamStart
from channel.slack.adapter import SlackAdapter
from tests.support.sessions import identity_of
from threadbound_emulator import FakeSlack

#: The writes whose text the model controls.
TEXT_WRITES = ("chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream", "chat.stopStream")
LEAK = "see https://evil.example/pixel.png?secret=hunter2"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.add_channel("C1", "general")
        fake.add_user("U1", "alice", display_name="Alice")
        fake.add_channel("D1", "dm-alice", is_im=True, user="U1")
        yield fake


def _off(value: object) -> bool:
    return value in (False, "false", "0", 0)


async def test_posts_edits_streams_and_a_canvas_link_all_ask_for_no_previews(slack: FakeSlack) -> None:
    """A post, an approval-card post and update, an edit, a stream (start, append, stop) and a
    canvas's link message each send ``unfurl_links=false`` and ``unfurl_media=false``."""
    adapter = SlackAdapter(
        token=slack.token,
        api_url=slack.api_url,
        identity=identity_of(slack),
        file_origins=[slack.files_origin],
    )
    try:
        root = slack.add_message("C1", "<@UBOT> hi", user="U1")
        origin = Origin("C1", root)
        posted = await adapter.post(origin, LEAK, effect_id="e1")
        await adapter.edit(posted.ref, LEAK + " (edited)")
        card = await adapter.post_blocks(
            origin, LEAK, [{"type": "section", "text": {"type": "mrkdwn", "text": LEAK}}], effect_id="e2"
        )
        await adapter.update_blocks(
            card.ref, LEAK, [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}]
        )
        dm_root = slack.add_message("D1", "hello", user="U1")
        live = await adapter.open_stream(Origin("D1", dm_root), StreamStart(LEAK, (), effect_id="e3"))
        await live.append(" and more " + LEAK)
        await live.stop(effect_id="e3")
        await adapter.post_document(origin, "Notes", LEAK)
    finally:
        await adapter.close()
    calls = [c for c in slack.calls if c.method in TEXT_WRITES]
    assert {c.method for c in calls} == set(TEXT_WRITES)
    assert len(slack.calls_to("chat.postMessage")) == 3  # the answer, the card, the canvas's link
    for c in calls:
        assert _off(c.params.get("unfurl_links")) and _off(c.params.get("unfurl_media")), (c.method, c.params)
