"""Tests for app.router.classify: which Slack events start a turn, and why the others do not."""

from __future__ import annotations

from typing import Any

import pytest

from app.intake.router import classify
from app.settings import Settings
from channel.slack.identity import SlackIdentity
from tests.support import events, fixtures

BOT = SlackIdentity(user_id="UBOT", bot_id="BBOT", team_id="", team_url="", scopes=())


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def _event(name: str) -> dict[str, Any]:
    event = fixtures.load(name)["event"]
    assert isinstance(event, dict)
    return event


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("slackbot_im", "a Slackbot notice starts nothing"),
        ("huddle_thread", "a system message (huddle_thread) starts nothing"),
        ("channel_topic", "a system message (channel_topic) starts nothing"),
        ("channel_purpose", "a system message (channel_purpose) starts nothing"),
        ("channel_name", "a system message (channel_name) starts nothing"),
        ("pinned_item", "a system message (pinned_item) starts nothing"),
        ("bot_add", "a system message (bot_add) starts nothing"),
        ("channel_join", "a join notice starts nothing"),
        ("document_mention", "a mention in a canvas has no thread to answer in; it starts nothing"),
        ("app_home_opened", "someone opened the app's tab; only messages start tasks"),
        ("assistant_thread_started", "the assistant pane opened; the person's first message starts the task"),
        ("reaction_added", "reactions start nothing"),
        ("member_joined_channel", "a member joined a channel; joins start nothing"),
        ("message_changed_unfurl", "an edit starts nothing"),
        ("github_bot_message", "posted by another bot (ALLOW_BOTS is off)"),
        ("forwarded_message", "not addressed to the bot"),
    ],
)
def test_system_messages_and_other_events_start_nothing_with_a_reason(name: str, reason: str) -> None:
    """Slackbot, system subtypes and non-message events are ignored, each with its own reason."""
    decision = classify(_event(name), BOT, _settings())
    assert (decision.action, decision.reason) == ("ignore", reason)


def test_a_forwarded_slackbot_notice_is_the_forwarding_persons_message() -> None:
    """Forwarding a Slackbot message to the bot is a person's DM: only the outer author counts."""
    decision = classify(_event("slackbot_forwarded_by_person"), BOT, _settings())
    assert (decision.action, decision.user) == ("start", "U043H11ES4V")


def test_a_mention_inside_a_forwarded_message_does_not_address_the_bot() -> None:
    """The bot's mention in shared content (someone else's words) is not this person's request."""
    event = _event("forwarded_message")
    event["attachments"][0]["text"] = "<@UBOT> please look"
    assert classify(event, BOT, _settings()).action == "ignore"


def test_an_edit_that_adds_the_mention_starts_the_edited_message() -> None:
    """The edited message, keyed by its own ts and thread, starts a task when the mention is new."""
    decision = classify(_event("message_changed_adds_mention"), BOT, _settings())
    assert decision.action == "start"
    assert decision.reason == "edited to mention the bot"
    assert (decision.channel, decision.ts, decision.thread_ts) == (
        "C043YJGBY49",
        "1663969333.524439",
        "1663969333.524439",
    )


def test_an_edit_in_a_thread_that_adds_the_mention_keeps_the_thread() -> None:
    """A reply edited to mention the bot starts (or resumes) the task of its thread."""
    envelope = events.message_changed(
        "C1", "U1", "<@UBOT> look", "20.0", previous_text="look", thread_ts="10.0"
    )
    decision = classify(envelope["event"], BOT, _settings())
    assert (decision.action, decision.ts, decision.thread_ts) == ("start", "20.0", "10.0")


@pytest.mark.parametrize(
    ("previous", "text", "channel_type", "reason"),
    [
        ("<@UBOT> hi", "<@UBOT> hi there", "channel", "an edit of a message that already mentioned the bot"),
        ("hi", "hi there", "channel", "an edit starts nothing"),
        ("hi", "<@UBOT> hi", "im", "an edit in a direct message (the message itself was the request)"),
    ],
)
def test_other_edits_start_nothing(previous: str, text: str, channel_type: Any, reason: str) -> None:
    """Edits that do not newly mention the bot, and edits in DMs, start nothing."""
    channel = "D1" if channel_type == "im" else "C1"
    envelope = events.message_changed(
        channel, "U1", text, "20.0", previous_text=previous, channel_type=channel_type
    )
    decision = classify(envelope["event"], BOT, _settings())
    assert (decision.action, decision.reason) == ("ignore", reason)


def test_an_edited_app_mention_starts_the_edited_message() -> None:
    """An app_mention for an edited message (it carries ``edited``) starts the message's own turn: an
    app subscribed to mentions only gets no message_changed twin."""
    envelope = events.app_mention("C1", "U1", "<@UBOT> hi there", "20.0")
    envelope["event"]["edited"] = {"user": "U1", "ts": "21.0"}
    decision = classify(envelope["event"], BOT, _settings())
    assert (decision.action, decision.reason, decision.ts, decision.thread_ts) == (
        "start",
        "mention (edited)",
        "20.0",
        "20.0",
    )


def test_an_edit_by_another_bot_follows_the_bot_rules() -> None:
    """An edit adding the mention to another bot's post is governed by ALLOW_BOTS like the post."""
    envelope = events.message_changed("C1", "UOTHER", "<@UBOT> hi", "20.0", previous_text="hi")
    envelope["event"]["message"]["bot_id"] = "BOTHER"
    assert classify(envelope["event"], BOT, _settings()).reason == "posted by another bot (ALLOW_BOTS is off)"


def test_me_messages_are_ordinary_messages() -> None:
    """A /me message in a DM is the person's message."""
    envelope = events.message("D1", "U1", "waves", "20.0", channel_type="im", subtype="me_message")
    assert classify(envelope["event"], BOT, _settings()).action == "start"


def test_enterprise_grid_mention_starts_a_task() -> None:
    """An org-wide install's mention by a W… user starts a task like any mention."""
    decision = classify(_event("enterprise_grid_app_mention"), BOT, _settings())
    assert (decision.action, decision.user) == ("start", "W061F7AUR")


def test_an_edit_whose_inner_message_names_another_channel_is_routed_to_the_events_channel() -> None:
    """A ``message_changed`` in #general whose edited message claims to be in #finance starts a
    task in #general (the event's channel), never in the channel the inner message names."""
    event = events.message_changed("C1", "U1", "<@UBOT> now asking", "1.000100", previous_text="hi")["event"]
    event["message"]["channel"] = "C9FINANCE"
    decision = classify(event, BOT, _settings(allowed_channels="C9FINANCE"))
    assert decision.action == "ignore" and decision.reason == "channel is not in ALLOWED_CHANNELS"
    decision = classify(event, BOT, _settings())
    assert (decision.action, decision.channel) == ("start", "C1")
