"""Streamed answers stay exactly once when Slack ends a stream, a connection drops or a run crashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channel.contract import Step
from channel.slack.inbound import inbound_message
from tests.support.sessions import slack_session
from threadbound_emulator import FakeSlack


def _shown(message: dict[str, Any]) -> str:
    """What a reader sees of a bot message: its markdown block (``text`` is the notification fallback)."""
    blocks = [b["text"] for b in message.get("blocks", []) if b.get("type") == "markdown"]
    return "".join(blocks) if blocks else str(message.get("text", ""))


def _thread(slack: FakeSlack) -> str:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    return slack.add_message("C1", "<@UBOT> how much?", user="U1")


async def test_a_stream_slack_ends_while_text_after_a_lt_is_held_continues_without_repeating(
    tmp_path: Path,
) -> None:
    """Slack ends the stream while "cost < budget" waits for a ``>``: the answer continues in a new
    message from exactly where the shown text stops, nothing repeated."""
    answer = "The cost < budget, so a -> b."
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            session = env.session
            assert session.stream_answers(inbound_message({"user": "U1", "team": "T1"}), interval=0.0)
            session.stream_text("text:1", "The cost ")
            await slack.wait_for_calls("chat.startStream")
            session.stream_text("text:1", "The cost < budget, ")
            session.stream_step(Step("t1", "Reading the thread", "in_progress"))
            await slack.wait_for_calls("chat.appendStream")
            assert slack.expire_streams() == 1
            await session.answer_with(answer)
        texts = [_shown(m) for m in slack.bot_messages("C1")]
        assert "".join(texts) == answer, texts
        assert texts[0] == "The cost "


async def _answer(session: Any, slack: FakeSlack, answer: str) -> dict[str, Any]:
    """Stream ``answer``'s first words, then finish with the whole of it."""
    started = slack.count("chat.startStream")
    assert session.stream_answers(inbound_message({"user": "U1", "team": "T1", "ts": "0"}), interval=0.0)
    session.stream_text("text:1", answer[: answer.index(" ") + 1])
    await slack.wait_for_calls("chat.startStream", started + 1)
    result: dict[str, Any] = await session.answer_with(answer)
    return result


async def test_a_dropped_stream_start_goes_on_in_the_message_slack_made(tmp_path: Path) -> None:
    """chat.startStream's connection drops after Slack made the message: the bot's unfinished message is
    found and the answer goes on in it, not refused and posted again."""
    answer = "Launch moves to March 3rd, because QA needs the extra week."
    async with FakeSlack() as slack:
        root = _thread(slack)
        slack.drop("chat.startStream")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            result = await _answer(env.session, slack, answer)
        assert "message" in result
        assert [_shown(m) for m in slack.bot_messages("C1")] == [answer]
        assert slack.count("chat.startStream") == 1 and slack.count("chat.postMessage") == 0


async def test_a_stream_start_nobody_could_check_is_removed_when_the_answer_ends(tmp_path: Path) -> None:
    """A dropped start whose look-up fails too is posted instead, and the message Slack made is found and
    removed when the answer ends: one answer, no fragment."""
    answer = "Launch moves to March 3rd, because QA needs the extra week."
    async with FakeSlack() as slack:
        root = _thread(slack)
        slack.drop("chat.startStream")
        slack.fail("conversations.replies", "internal_error")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            await _answer(env.session, slack, answer)
            assert await env.store.open_effects(env.task.task_id) == []
        assert [_shown(m) for m in slack.bot_messages("C1")] == [answer]
        assert slack.count("chat.delete") == 1


async def test_a_crash_before_the_stream_ref_is_journalled_leaves_no_orphan(tmp_path: Path) -> None:
    """A run dies after chat.startStream and before its ref is journalled: the next run finds the bot's
    unfinished message after the intent, removes it and is told the reply was cut off."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            await env.session.journal.open(
                "channel_reply",
                {"channel": "C1", "thread_ts": root, "part": 0, "stream": True, "after": root},
            )
            await slack.web_client().chat_startStream(
                channel="C1",
                thread_ts=root,
                recipient_user_id="U1",
                recipient_team_id="T1",
                markdown_text="Half",
            )
            assert len(slack.bot_messages("C1")) == 1
            again = env.new_session()
            notes = await again.reconcile(await env.store.open_effects(env.task.task_id))
            assert slack.bot_messages("C1") == []
            assert len(notes) == 1 and "cut off while being written and removed" in notes[0]
            assert await env.store.open_effects(env.task.task_id) == []


async def test_an_ambiguous_append_that_landed_is_not_repeated(tmp_path: Path) -> None:
    """chat.appendStream answered internal_error after Slack applied it: the message is looked at, the
    append counts as done, and the answer is shown once."""
    answer = "Launch moves to March 3rd, because QA needs the extra week."
    async with FakeSlack() as slack:
        root = _thread(slack)
        slack.fail("chat.appendStream", "internal_error", status=500, applied=True)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            await _answer(env.session, slack, answer)
        assert [_shown(m) for m in slack.bot_messages("C1")] == [answer]
        assert slack.count("chat.postMessage") == 0


async def test_an_ambiguous_stop_is_looked_up_and_the_message_marked_as_ours(tmp_path: Path) -> None:
    """chat.stopStream answered by a proxy's 504 HTML page: Slack is looked at; a stop that landed counts
    as done, one that did not is marked with the effect id by an update, never left unfinished."""
    answer = "Launch moves to March 3rd, because QA needs the extra week."
    async with FakeSlack() as slack:
        root = _thread(slack)
        for applied in (True, False):
            slack.fail("chat.stopStream", "Gateway Timeout", status=504, applied=applied, html=True)
            async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
                result = await _answer(env.session, slack, answer)
            assert "message" in result
            message = slack.bot_messages("C1")[-1]
            assert _shown(message) == answer
            assert message["metadata"]["event_type"] == "threadbound_effect"
        assert len(slack.bot_messages("C1")) == 2
        assert slack.count("chat.postMessage") == 0 and slack.count("chat.update") == 1


async def test_text_that_was_no_answer_is_deleted_without_being_stopped_first(tmp_path: Path) -> None:
    """Streamed text the run drops is deleted as it is: never stopped first with the effect id, which
    would make it pass for a posted answer if the deletion failed."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            session = env.session
            assert session.stream_answers(inbound_message({"user": "U1", "team": "T1"}), interval=0.0)
            session.stream_text("text:1", "Let me look first. ")
            await slack.wait_for_calls("chat.startStream")
            await session.drop_answer()
            assert await env.store.open_effects(env.task.task_id) == []
        assert slack.bot_messages("C1") == []
        assert slack.count("chat.stopStream") == 0


async def test_a_dropped_text_whose_deletion_failed_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """The deletion of dropped streamed text fails: its ref stays journalled, and the next run's reconcile
    removes it (it carries no effect id, so it is not taken for an answer)."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            session = env.session
            assert session.stream_answers(inbound_message({"user": "U1", "team": "T1"}), interval=0.0)
            session.stream_text("text:1", "Let me look first. ")
            await slack.wait_for_calls("chat.startStream")
            slack.fail("chat.delete", "internal_error")
            await session.drop_answer()
            assert len(slack.bot_messages("C1")) == 1
            again = env.new_session()
            notes = await again.reconcile(await env.store.open_effects(env.task.task_id))
            assert notes == []
            assert await env.store.open_effects(env.task.task_id) == []
        assert slack.bot_messages("C1") == []


async def test_a_dropped_start_that_cannot_be_told_apart_leaves_no_unfinished_message(tmp_path: Path) -> None:
    """A dropped chat.startStream when another unfinished bot message is in the thread: neither is taken
    for the stream; the answer is posted whole and every unfinished message is removed at its end."""
    answer = "Launch moves to March 3rd, because QA needs the extra week."
    async with FakeSlack() as slack:
        root = _thread(slack)
        await slack.web_client().chat_startStream(
            channel="C1", thread_ts=root, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Old"
        )
        slack.drop("chat.startStream")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            await _answer(env.session, slack, answer)
            assert await env.store.open_effects(env.task.task_id) == []
        assert [_shown(m) for m in slack.bot_messages("C1")] == [answer]
