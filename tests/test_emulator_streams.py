"""The emulator's streaming methods enforce Slack's rules: recipient, size, stop and expiry."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError

from threadbound_emulator import FakeSlack


def _setup(slack: FakeSlack) -> str:
    slack.add_channel("C1", "general")
    slack.add_channel("D1", "dm", is_im=True, user="U1")
    return slack.add_message("C1", "<@UBOT> hi", user="U1")


async def _error(call: object) -> str:
    with pytest.raises(SlackApiError) as info:
        await call  # type: ignore[misc]
    return str(info.value.response["error"])


async def test_a_stream_grows_and_stops_with_blocks_and_metadata() -> None:
    """Start, appends and stop build one message; stop adds blocks and metadata; the thread shows it."""
    async with FakeSlack() as slack:
        root = _setup(slack)
        client = slack.web_client()
        started = await client.chat_startStream(
            channel="C1", thread_ts=root, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Hel"
        )
        ts = started["ts"]
        await client.chat_appendStream(channel="C1", ts=ts, markdown_text="lo ")
        await client.chat_appendStream(
            channel="C1",
            ts=ts,
            chunks=[
                {"type": "task_update", "id": "t1", "title": "Reading the thread", "status": "in_progress"},
                {"type": "markdown_text", "text": "world"},
            ],
        )
        feedback = [{"type": "context_actions", "elements": [{"type": "feedback_buttons", "action_id": "f"}]}]
        await client.chat_stopStream(
            channel="C1", ts=ts, blocks=feedback, metadata={"event_type": "x", "event_payload": {"k": "v"}}
        )
        stream = slack.streams[("C1", ts)]
        assert stream.appends == ["Hel", "lo ", "world", ""]
        assert stream.tasks == {"t1": ("Reading the thread", "in_progress")}
        assert stream.state == "stopped"
        reply = slack.messages("C1", root)[-1]
        assert reply["text"] == "Hello world"
        assert reply["blocks"][0] == {"type": "markdown", "text": "Hello world"}
        assert reply["blocks"][1]["type"] == "context_actions"
        assert reply["metadata"] == {"event_type": "x", "event_payload": {"k": "v"}}
        assert await _error(client.chat_appendStream(channel="C1", ts=ts, markdown_text="x")) == (
            "message_not_in_streaming_state"
        )
        assert await _error(client.chat_stopStream(channel="C1", ts=ts)) == "message_not_in_streaming_state"


async def test_channels_need_a_recipient_and_dms_a_thread() -> None:
    """In a channel a stream without recipient_user_id/team_id is refused; in a DM one without a thread."""
    async with FakeSlack() as slack:
        root = _setup(slack)
        client = slack.web_client()
        assert await _error(client.chat_startStream(channel="C1", thread_ts=root, markdown_text="x")) == (
            "missing_recipient_user_id"
        )
        assert await _error(
            client.chat_startStream(channel="C1", thread_ts=root, recipient_user_id="U1", markdown_text="x")
        ) == ("missing_recipient_team_id")
        assert await _error(client.chat_startStream(channel="D1", thread_ts="", markdown_text="x")) == (
            "invalid_thread_ts"
        )
        dm_root = slack.add_message("D1", "hi", user="U1")
        assert (await client.chat_startStream(channel="D1", thread_ts=dm_root, markdown_text="x"))["ok"]


async def test_size_limit_and_expiry_end_appends() -> None:
    """More than 12,000 characters is msg_too_long (nothing added); an expired stream refuses appends."""
    async with FakeSlack() as slack:
        root = _setup(slack)
        client = slack.web_client()
        started = await client.chat_startStream(
            channel="C1",
            thread_ts=root,
            recipient_user_id="U1",
            recipient_team_id="T1",
            markdown_text="a" * 11_000,
        )
        ts = started["ts"]
        assert await _error(client.chat_appendStream(channel="C1", ts=ts, markdown_text="b" * 1_001)) == (
            "msg_too_long"
        )
        assert slack.streams[("C1", ts)].text == "a" * 11_000
        await client.chat_appendStream(channel="C1", ts=ts, markdown_text="b" * 1_000)
        assert slack.expire_streams() == 1
        assert await _error(client.chat_appendStream(channel="C1", ts=ts, markdown_text="c")) == (
            "message_not_in_streaming_state"
        )
        assert slack.messages("C1", root)[-1]["text"] == "a" * 11_000 + "b" * 1_000


async def test_malformed_chunks_are_refused() -> None:
    """A task_update without a known status, or an unknown chunk type, is invalid_chunks."""
    async with FakeSlack() as slack:
        root = _setup(slack)
        client = slack.web_client()
        bad = [{"type": "task_update", "id": "t", "title": "x", "status": "running"}]
        assert (
            await _error(
                client.chat_startStream(
                    channel="C1", thread_ts=root, recipient_user_id="U1", recipient_team_id="T1", chunks=bad
                )
            )
            == "invalid_chunks"
        )
