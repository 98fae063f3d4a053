"""Slack's error strings become the contract's neutral codes in the Slack adapter, and nowhere else:
a reaction already there (or not there to remove) is ``already_done``, a message that no longer
exists is ``MessageGone`` (code ``not_found``), and the rest of ``not_found`` stays a plain error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from channel.contract import Origin
from channel.errors import ChannelError, ConversationGone, MessageGone
from channel.fake import FakeAdapter
from channel.slack import SlackAdapter
from channel.slack.errors import map_slack_error
from tests.support.sessions import identity_of
from threadbound_emulator import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.add_user("U1", "alice", display_name="Alice")
        fake.add_channel("C1", "general")
        yield fake


@pytest.fixture
async def adapter(slack: FakeSlack) -> AsyncIterator[SlackAdapter]:
    adapter = SlackAdapter(
        token=slack.token, api_url=slack.api_url, identity=identity_of(slack), file_origins=[]
    )
    try:
        yield adapter
    finally:
        await adapter.close()


async def test_already_reacted_and_no_reaction_are_already_done(
    slack: FakeSlack, adapter: SlackAdapter
) -> None:
    """Slack's already_reacted and no_reaction reach the caller as already_done (Slack's string kept
    for logs only)."""
    ts = slack.add_message("C1", "hello", "U1")
    await adapter.react(f"C1:{ts}", "eyes", add=True)
    with pytest.raises(ChannelError) as again:
        await adapter.react(f"C1:{ts}", "eyes", add=True)
    assert again.value.code == "already_done" and again.value.provider_code == "already_reacted"
    with pytest.raises(ChannelError) as missing:
        await adapter.react(f"C1:{ts}", "tada", add=False)
    assert missing.value.code == "already_done" and missing.value.provider_code == "no_reaction"


async def test_a_message_that_no_longer_exists_is_message_gone(adapter: SlackAdapter) -> None:
    """Slack's message_not_found is MessageGone, which the model reads as not_found."""
    with pytest.raises(MessageGone) as gone:
        await adapter.react("C1:1600000000.000001", "eyes", add=True)
    assert gone.value.code == "not_found"
    assert gone.value.as_result()["error"]["code"] == "not_found"


def _slack_error(error: str, status: int = 200) -> SlackApiError:
    response = AsyncSlackResponse(
        client=None,  # type: ignore[arg-type]
        http_verb="POST",
        api_url="https://slack.test/api/chat.update",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=status,
    )
    return SlackApiError(error, response)


def test_only_a_missing_message_is_message_gone() -> None:
    """A conversation or thread not found is not_found, but not MessageGone: a write to it that a
    crash interrupted is not counted done; nor is an ambiguous answer, whatever its string."""
    for code in ("channel_not_found", "thread_not_found"):
        mapped = map_slack_error(_slack_error(code), "chat.update")
        assert mapped is not None and mapped.code == "not_found" and not isinstance(mapped, MessageGone)
    gone = map_slack_error(_slack_error("message_not_found"), "chat.update")
    assert isinstance(gone, MessageGone) and gone.message == "chat.update: That message no longer exists."
    server = map_slack_error(_slack_error("message_not_found", status=502), "chat.update")
    assert server is not None and server.ambiguous and not isinstance(server, MessageGone)


async def test_the_fake_adapter_raises_the_neutral_codes(tmp_path: Path) -> None:
    """The fake adapter speaks the contract, not Slack: already_done and MessageGone, no Slack string."""
    fake = FakeAdapter(files_dir=tmp_path / "provider")
    root = fake.add_message(Origin("general"), "hello", author="Alice")
    await fake.react(root.ref, "eyes", add=True)
    for emoji, add in (("eyes", True), ("tada", False)):
        with pytest.raises(ChannelError) as done:
            await fake.react(root.ref, emoji, add=add)
        assert done.value.code == "already_done" and done.value.provider_code is None
    with pytest.raises(MessageGone) as gone:
        await fake.react("fake:general:999", "eyes", add=True)
    assert gone.value.provider_code is None


def test_a_conversation_gone_is_its_own_class_with_the_code_the_model_reads() -> None:
    """Slack's answers that the thread or channel is gone become ConversationGone (the run ends
    without an apology on that class, never on a Slack string); the code the model reads is as
    before."""
    for code, expected in (
        ("thread_not_found", "not_found"),
        ("channel_not_found", "not_found"),
        ("is_archived", "unsupported"),
        ("not_in_channel", "unsupported"),
    ):
        mapped = map_slack_error(_slack_error(code), "chat.postMessage")
        assert isinstance(mapped, ConversationGone) and mapped.code == expected
    assert not isinstance(map_slack_error(_slack_error("message_not_found"), "chat.update"), ConversationGone)
    server = map_slack_error(_slack_error("channel_not_found", status=503), "chat.postMessage")
    assert server is not None and not isinstance(server, ConversationGone)
