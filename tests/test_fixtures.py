"""End to end over real HTTP: every Slack payload fixture (tests/fixtures/slack/) is acked, starts a
turn or not as a person would expect, shows the model what a person reads, and logs no error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app import logs
from tests.support import events, fixtures
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.prompts import readable
from threadbound_emulator import FakeSlack

# What the model must be shown for fixtures that start a turn; every other envelope starts nothing.
TURNS: dict[str, list[str]] = {
    "forwarded_message_dm": ["):\n> Forwarded message from lev in #dev-null, 2024-08-29T17:24:41Z:\n> 123"],
    "share_with_message": [
        "Lev (msg_",
        "@threadbound hello check that out!",
        "> Forwarded message from lev in #dev-null",
        "> this will be shared with a message",
    ],
    "slackbot_forwarded_by_person": [
        "Jade (msg_",
        "what does this mean?",
        "> Forwarded message from Slackbot",
        "> You have been removed from #testing-slack-app by @Jade",
    ],
    "file_share": ["message message message", ": namenamename.txt (text/plain, 12 bytes)"],
    "file_share_slack_connect": ["message message message", ": contract.pdf (application/pdf, 18 bytes)"],
    "file_share_slack_connect_no_access": [
        "message message message",
        "attached, but you cannot open it (Slack does not let the bot see this file): a file",
    ],
    "rich_text_dm": ["#general :cat: @Jade https://google.com text text text"],
    "rich_text_containers_dm": [
        "- (a message in #release)\n- https://example.com/list-item\n> (a message in #release)\n",
        "```\nSee the documentation:\nhttps://example.com/code-reference\n```",
    ],
    "message_changed_adds_mention": [
        "@threadbound what is this about?",
        "> Linked message from jadel in #general, 2022-09-23T20:51:32Z:",
        "> asdfhlkfasdlhsdf",
    ],
    "enterprise_grid_app_mention": ["Riv (msg_", "@threadbound is it everything a river should be?"],
}
# The reason each envelope that starts nothing is logged with.
IGNORED: dict[str, str] = {
    "forwarded_message": "not addressed to the bot",
    "rich_text": "not addressed to the bot",
    "link": "not addressed to the bot",
    "message_changed_unfurl": "an edit starts nothing",
    "slackbot_im": "a Slackbot notice starts nothing",
    "huddle_thread": "a system message (huddle_thread) starts nothing",
    "channel_join": "a join notice starts nothing",
    "channel_topic": "a system message (channel_topic) starts nothing",
    "channel_purpose": "a system message (channel_purpose) starts nothing",
    "channel_name": "a system message (channel_name) starts nothing",
    "pinned_item": "a system message (pinned_item) starts nothing",
    "bot_add": "a system message (bot_add) starts nothing",
    "document_mention": "a mention in a canvas has no thread to answer in; it starts nothing",
    "app_home_opened": "someone opened the app's tab; only messages start tasks",
    "assistant_thread_started": "the assistant pane opened; the person's first message starts the task",
    "reaction_added": "reactions start nothing",
    "member_joined_channel": "a member joined a channel; joins start nothing",
    "github_bot_message": "posted by another bot (ALLOW_BOTS is off)",
    "non_spec_attachment": "posted by another bot (ALLOW_BOTS is off)",
}
ROWS = ["unfurl_video_row", "unfurl_article_row"]
# Slack IDs outside URLs (a link a person pasted is content, not an address the bot added).
_ID = re.compile(r"(?<![/\w])[UWCGDSBTFR][A-Z0-9]{8,}\b")


def _workspace(slack: FakeSlack) -> None:
    """The test workspace the fixtures were adapted to: their people, conversations and files."""
    slack.add_user("U05JAA9EN4T", "lev", display_name="Lev")
    slack.add_user("U043H11ES4V", "jadel", display_name="Jade")
    slack.add_user("W061F7AUR", "river", display_name="Riv")
    slack.add_user("USLACKBOT", "slackbot", display_name="Slackbot", is_bot=True)
    slack.add_user("U04P5DP34", "kim", display_name="Kim")
    slack.add_user("U2768D85S", "sam", display_name="Sam")
    slack.add_channel("C07KHDGQ7K3", "forwards")
    slack.add_channel("C07KTH1T4CQ", "dev-null")
    slack.add_channel("C043YJGBY49", "general")
    slack.add_channel("C123ABC456", "release")
    slack.add_channel("D0442US94JD", "", is_im=True, user="U043H11ES4V")
    slack.add_file("F12345678", "contract.pdf", "application/pdf", b"%PDF-1.7 contract\n")


def _store(slack: FakeSlack, event: dict[str, Any]) -> None:
    """Put the delivered message into the workspace, as Slack has it when the event arrives."""
    message = event.get("message", event) if event.get("subtype") == "message_changed" else event
    channel = str(event["channel"])
    ts = slack.add_message(
        channel,
        str(message.get("text") or ""),
        str(message.get("user") or ""),
        ts=str(message["ts"]),
        blocks=message.get("blocks"),
        files=message.get("files"),
    )
    stored = slack.find(channel, ts)
    assert stored is not None
    if message.get("attachments"):
        stored["attachments"] = message["attachments"]


def _no_ids(text: str) -> None:
    assert not _ID.findall(re.sub(r"https?://\S+", "", text)), text


def test_every_envelope_fixture_has_an_expectation() -> None:
    """A new fixture must say whether it starts a turn (and what the model sees) or why not."""
    envelopes = {n for n in fixtures.names() if fixtures.load(n).get("type") == "event_callback"}
    assert envelopes == set(TURNS) | set(IGNORED)
    assert set(fixtures.names()) - envelopes == set(ROWS)


@pytest.mark.parametrize("name", sorted(TURNS) + sorted(IGNORED))
async def test_fixture_end_to_end(name: str, tmp_path: Path) -> None:
    """Acked 200; a turn only where expected, showing what a person reads; no error logged."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text="seen")]
        return [""]

    envelope = fixtures.load(name)
    async with FakeSlack() as slack:
        _workspace(slack)
        if name in TURNS:
            _store(slack, envelope["event"])
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            with logs.capture(app.settings) as captured:
                response = await app.deliver(envelope)
                await app.idle()
                again = await app.deliver(envelope, retry_num=1)  # Slack's retry changes nothing
                await app.idle()
        assert (response.status, again.status) == (200, 200)
        problems = [line for line in captured.lines() if line.get("level") in ("error", "critical")]
        assert problems == [] and "Traceback" not in captured.text
        [delivery, *_] = captured.lines("delivery")
        if name.startswith("message_changed"):
            assert delivery["user"] == "U043H11ES4V"  # an edit is logged with the edited message's author
        if name in IGNORED:
            assert prompts == [] and slack.bot_messages() == []
            assert (delivery["outcome"], delivery["reason"]) == ("ignored", IGNORED[name])
            return
        assert delivery["outcome"] == "claimed" and len(prompts) == 1
        shown = readable(prompts[0])  # the rows as a person reads them: "Lev (msg_…): text"
        for expected in TURNS[name]:
            assert expected in shown, (expected, shown)
        assert "0 bytes" not in prompts[0]
        _no_ids(prompts[0])
        assert [m["text"] for m in slack.bot_messages()] == ["seen"]


async def test_channel_read_rows_show_forwards_previews_and_rich_text(tmp_path: Path) -> None:
    """channel_read rows render like the prompt: forwarded messages, link previews, rich text."""
    rows: list[dict[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        for name, result in turn.results:
            if name == "channel_read":
                rows.extend(result["messages"])
                return [""]
        return [call("channel_read")]

    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_channel("C1", "general-2")
        root = slack.add_message("C1", "<@UBOT> summarise this thread", "U043H11ES4V")
        for name in ROWS:
            row = fixtures.load(name)
            ts = slack.add_message("C1", row["text"], row["user"], thread_ts=root)
            stored = slack.find("C1", ts)
            assert stored is not None
            stored["attachments"] = row["attachments"]
        forwarded = fixtures.load("forwarded_message")["event"]
        ts = slack.add_message("C1", "", forwarded["user"], thread_ts=root)
        stored = slack.find("C1", ts)
        assert stored is not None
        stored["attachments"] = forwarded["attachments"]
        containers = fixtures.load("rich_text_containers_dm")["event"]
        slack.add_message(
            "C1", containers["text"], containers["user"], thread_ts=root, blocks=containers["blocks"]
        )
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            with logs.capture(app.settings) as captured:
                await app.deliver(
                    events.app_mention("C1", "U043H11ES4V", "<@UBOT> summarise this thread", root)
                )
                await app.idle()
        assert not [line for line in captured.lines() if line.get("level") in ("error", "critical")]
    texts = [row["text"] for row in rows]
    assert "> Link preview (YouTube): [Tom Scott vs Irving Finkel" in texts[1]
    assert "> Link preview (computerwoche.de): [Blockchain revolutioniert Mobilität?" in texts[2]
    assert "> Sie lieben Ihr Auto?" in texts[2]
    assert texts[3] == "> Forwarded message from lev in #dev-null, 2024-08-29T17:24:41Z:\n> 123"
    assert texts[4].startswith("- (a message in #release)\n")
    assert [row["author"]["display_name"] for row in rows[1:4]] == ["Kim", "Sam", "Lev"]
    for text in texts:
        _no_ids(text)
