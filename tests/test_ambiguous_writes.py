"""Ambiguous Slack answers (5xx, HTML pages, internal_error, fatal_error, request_timeout, dropped
connections) are looked up before a write is reported failed or made again, for every write kind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.sessions import SessionEnv, slack_session
from threadbound_emulator import FakeSlack

#: (error, HTTP status, HTML page instead of JSON): the answers that do not say whether it happened.
AMBIGUOUS = [
    ("internal_error", 200, False),
    ("fatal_error", 200, False),
    ("request_timeout", 200, False),
    ("Bad Gateway", 502, True),
    ("Gateway Timeout", 504, True),
    ("service_unavailable", 503, False),
]


@pytest.fixture
async def env(tmp_path: Path) -> Any:
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        root = slack.add_message("C1", "<@UBOT> hi", user="U1")
        async with slack_session(
            slack,
            tmp_path,
            channel="C1",
            thread_ts=root,
            enabled=["channel_edit", "channel_retract", "channel_attach"],
        ) as session_env:
            yield session_env


def _fail(env: SessionEnv, method: str, fault: tuple[str, int, bool], *, applied: bool) -> None:
    error, status, html = fault
    env.slack.fail(method, error, status=status, applied=applied, html=html)


@pytest.mark.parametrize("fault", AMBIGUOUS)
async def test_a_post_that_landed_despite_the_answer_is_found_not_reported_failed(
    env: SessionEnv, fault: tuple[str, int, bool]
) -> None:
    """chat.postMessage applied but answered ambiguously: the post is found by its effect id and the
    model gets its handle; it is posted once."""
    _fail(env, "chat.postMessage", fault, applied=True)
    result = await env.session.call("channel_reply", {"text": "The launch moves to March 3rd."})
    assert result.get("message", "").startswith("msg_"), result
    assert env.slack.count("chat.postMessage") == 1
    assert len(env.slack.bot_messages("C1")) == 1


@pytest.mark.parametrize("fault", AMBIGUOUS[:2])
async def test_a_post_that_did_not_land_is_reported_failed_after_the_look_up(
    env: SessionEnv, fault: tuple[str, int, bool]
) -> None:
    """chat.postMessage answered ambiguously and not applied: looked up, not found, reported failed."""
    _fail(env, "chat.postMessage", fault, applied=False)
    result = await env.session.call("channel_reply", {"text": "The launch moves to March 3rd."})
    assert result["error"]["code"] == "slack_error"
    assert env.slack.bot_messages("C1") == []
    assert env.slack.count("conversations.replies") >= 1


async def test_an_unanswered_look_up_says_the_post_may_have_happened(env: SessionEnv) -> None:
    """When the look-up fails too, the model is told the post may have happened, not that it failed."""
    env.slack.fail("chat.postMessage", "internal_error", applied=True)
    env.slack.fail("conversations.replies", "internal_error", times=2)
    result = await env.session.call("channel_reply", {"text": "The launch moves to March 3rd."})
    assert "may have been done" in result["error"]["message"]


async def _posted(env: SessionEnv, text: str = "Draft") -> str:
    result = await env.session.call("channel_reply", {"text": text})
    handle: str = result["message"]
    return handle


@pytest.mark.parametrize("fault", AMBIGUOUS[:1] + AMBIGUOUS[3:4])
async def test_an_edit_that_landed_is_done(env: SessionEnv, fault: tuple[str, int, bool]) -> None:
    """chat.update applied but answered ambiguously: the text shown is checked and the edit is done."""
    handle = await _posted(env)
    _fail(env, "chat.update", fault, applied=True)
    result = await env.session.call("channel_edit", {"message": handle, "text": "Final"})
    assert result == {"message": handle}
    assert env.slack.count("chat.update") == 1


@pytest.mark.parametrize("fault", AMBIGUOUS[2:3] + AMBIGUOUS[4:5])
async def test_a_retraction_that_landed_is_done(env: SessionEnv, fault: tuple[str, int, bool]) -> None:
    """chat.delete applied but answered ambiguously: the message is gone, so the retraction is done."""
    handle = await _posted(env)
    _fail(env, "chat.delete", fault, applied=True)
    result = await env.session.call("channel_retract", {"message": handle})
    assert result == {"ok": True}
    assert env.slack.bot_messages("C1") == []


@pytest.mark.parametrize("method", ["reactions.add", "reactions.remove"])
async def test_a_reaction_that_landed_is_done(env: SessionEnv, method: str) -> None:
    """reactions.add / remove applied but answered 500: the bot's reaction is looked up, done."""
    handle = await _posted(env)
    if method == "reactions.remove":
        await env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    env.slack.fail(method, "internal_error", status=500, applied=True)
    action = "add" if method == "reactions.add" else "remove"
    result = await env.session.call("channel_react", {"message": handle, "emoji": "eyes", "action": action})
    assert result == {"ok": True}
    assert env.slack.count(method) == 1
    assert bool(env.slack.bot_messages("C1")[0].get("reactions")) == (action == "add")


async def test_an_approval_card_post_that_landed_is_found(env: SessionEnv) -> None:
    """A Block Kit post (an approval card) applied but answered 502: found by its effect id."""
    env.slack.fail("chat.postMessage", "Bad Gateway", status=502, applied=True, html=True)
    posted = await env.adapter.post_blocks(
        env.session.origin,
        "Approve?",
        [{"type": "section", "text": {"type": "mrkdwn", "text": "Ok?"}}],
        effect_id="e1",
    )
    assert posted.ref.startswith("C1:")
    assert env.slack.count("chat.postMessage") == 1


async def test_an_ambiguous_upload_completion_that_shared_the_file_is_done(env: SessionEnv) -> None:
    """files.completeUploadExternal answered 502 after Slack shared the file: files.info shows it shared
    here, so the attach is done (once), with its handles."""
    await asyncio.to_thread((env.task_dir / "out.csv").write_bytes, b"a,b\n1,2\n")
    env.slack.fail("files.completeUploadExternal", "Bad Gateway", status=502, applied=True, html=True)
    result = await env.session.call("channel_attach", {"path": "out.csv"})
    assert result["file"].startswith("file_"), result
    assert env.slack.count("files.completeUploadExternal") == 1


async def test_an_upload_whose_answer_was_lost_is_reported_as_maybe_done(env: SessionEnv) -> None:
    """A dropped connection on the upload's completion carries no file id to look up: it is reported as
    possibly done (read before attaching again), never as a plain failure, and not repeated."""
    await asyncio.to_thread((env.task_dir / "out.csv").write_bytes, b"a,b\n1,2\n")
    env.slack.drop("files.completeUploadExternal")
    result = await env.session.call("channel_attach", {"path": "out.csv"})
    assert "may have been attached" in result["error"]["message"]
    assert env.slack.count("files.completeUploadExternal") == 1
