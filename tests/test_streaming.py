"""Answers stream into the thread as the model writes them (STREAM), end to end over real HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.process import ServerProcess
from tests.support.waiting import eventually
from threadbound_emulator import Call, FakeSlack

ANSWER = (
    "Here is what we decided. The launch moves to **March 3rd**, because QA needs the extra week. "
    "Bob owns the checklist and Alice signs off on the release notes. Ping me for the details."
)


async def _answer(slack: FakeSlack, model: Any, tmp_path: Path, **harness: Any) -> str:
    """Alice mentions the bot once; the app (flushing streams every 50 ms) runs until idle and stops.
    Returns the mention's ts."""
    async with AppHarness(slack, model=model, data_dir=tmp_path, **harness) as app:
        _fast_flush(app)
        root = await _mention(app)
        await app.idle()
    return root


async def _mention(app: AppHarness, text: str = "what did we decide?") -> str:
    ts = app.slack.add_message("C1", f"<@UBOT> {text}", user="U1")
    response = await app.deliver(events.app_mention("C1", "U1", f"<@UBOT> {text}", ts))
    assert response.status == 200
    return ts


def _fast_flush(app: AppHarness, interval: float = 0.05) -> None:
    assert app.service is not None
    app.service.runner.executor.stream_interval = interval


def _final_text(turn: Turn) -> list[Any]:
    return [ANSWER] if turn.prompt else [""]


def _reply_call(turn: Turn) -> list[Any]:
    if turn.prompt:
        return [call("channel_reply", text=ANSWER)]
    return [""]


def _shown(message: dict[str, Any]) -> str:
    """What a reader sees of a bot message: its markdown block (``text`` is the notification fallback)."""
    blocks = [b["text"] for b in message.get("blocks", []) if b.get("type") == "markdown"]
    return "".join(blocks) if blocks else str(message.get("text", ""))


def _grew(appends: list[str]) -> bool:
    """At least three calls added text: the reader saw the message grow before it was stopped."""
    texts = [a for a in appends if a]
    return len(texts) >= 3


async def test_a_final_text_answer_grows_in_the_thread(slack: FakeSlack, tmp_path: Path) -> None:
    """Final text streams: a start, several appends of more text, a stop; the exact answer, with feedback."""
    root = await _answer(slack, scripted(_final_text, chunk=12, chunk_delay=0.02), tmp_path)
    assert slack.count("chat.postMessage") == 0
    [stream] = slack.streams.values()
    assert _grew(stream.appends), stream.appends
    assert stream.state == "stopped"
    assert stream.recipient_user_id == "U1" and stream.recipient_team_id == "T1"
    [reply] = slack.bot_messages("C1")
    assert reply["thread_ts"] == root
    assert _shown(reply) == ANSWER
    assert reply["blocks"][0] == {"type": "markdown", "text": ANSWER}
    assert reply["blocks"][1]["elements"][0]["type"] == "feedback_buttons"
    assert reply["metadata"]["event_type"] == "threadbound_effect"


async def test_a_channel_reply_answer_grows_while_its_call_is_generated(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """A channel_reply's text argument streams as the call's JSON arrives; the call then ends that message."""
    await _answer(slack, scripted(_reply_call, chunk=12, chunk_delay=0.02), tmp_path)
    assert slack.count("chat.postMessage") == 0
    [stream] = slack.streams.values()
    assert _grew(stream.appends), stream.appends
    assert [_shown(m) for m in slack.bot_messages("C1")] == [ANSWER]


async def test_tool_steps_show_in_the_stream_instead_of_the_status(slack: FakeSlack, tmp_path: Path) -> None:
    """A tool at work is a task update (in progress, then complete) in the streamed answer, not a status."""

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return [call("channel_read")]
        if turn.results and turn.results[-1][0] == "channel_read":
            return [ANSWER]
        return [""]

    await _answer(slack, scripted(script, chunk=40), tmp_path)
    [stream] = slack.streams.values()
    assert [status for _, status in stream.task_updates] == ["in_progress", "complete"]
    assert [title for title, _ in stream.tasks.values()] == ["Reading the thread"]
    assert "is reading the thread…" not in [s.status for s in slack.statuses]
    assert [_shown(m) for m in slack.bot_messages("C1")] == [ANSWER]


async def test_an_expired_stream_continues_in_a_new_message(slack: FakeSlack, tmp_path: Path) -> None:
    """Slack closes the stream mid-answer: the rest goes into a new message, nothing lost or repeated."""

    def expire_after_second_append(c: Call) -> None:
        if c.method == "chat.appendStream" and slack.count("chat.appendStream") == 2:
            slack.expire_streams()

    slack.observe(expire_after_second_append)
    await _answer(slack, scripted(_final_text, chunk=8, chunk_delay=0.02), tmp_path)
    texts = [_shown(m) for m in slack.bot_messages("C1")]
    assert len(texts) == 2
    assert "".join(texts) == ANSWER
    assert slack.count("chat.startStream") == 2


async def test_stream_off_posts_whole_messages(slack: FakeSlack, tmp_path: Path) -> None:
    """STREAM=off: no stream methods, one chat.postMessage with the answer and its feedback buttons."""
    await _answer(slack, scripted(_reply_call, chunk=12), tmp_path, stream="off")
    assert slack.count("chat.startStream") == 0
    assert slack.count("chat.postMessage") == 1
    [reply] = slack.bot_messages("C1")
    assert _shown(reply) == ANSWER
    assert reply["blocks"][-1]["type"] == "context_actions"


async def test_a_refused_stream_falls_back_to_a_post(slack: FakeSlack, tmp_path: Path) -> None:
    """Slack refusing chat.startStream: the same answer is posted whole, once."""
    slack.fail("chat.startStream", "not_allowed_token_type", times=None)
    await _answer(slack, scripted(_final_text, chunk=12, chunk_delay=0.01), tmp_path)
    assert slack.count("chat.postMessage") == 1
    assert [_shown(m) for m in slack.bot_messages("C1")] == [ANSWER]


async def test_a_failing_append_posts_the_rest_without_repeating(slack: FakeSlack, tmp_path: Path) -> None:
    """An append failing for another reason: what was shown stays, the rest is posted, nothing twice."""
    slack.fail("chat.appendStream", "internal_error", times=None)
    await _answer(slack, scripted(_final_text, chunk=8, chunk_delay=0.02), tmp_path)
    texts = [_shown(m) for m in slack.bot_messages("C1")]
    assert len(texts) == 2
    assert "".join(texts) == ANSWER


async def test_text_that_was_no_answer_is_removed(slack: FakeSlack, tmp_path: Path) -> None:
    """Text written before a tool call, in a run that then answers by channel_reply, does not stay."""

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return ["Let me look at the thread first.", call("channel_read")]
        if turn.results and turn.results[-1][0] == "channel_read":
            return [call("channel_reply", text=ANSWER)]
        return [""]

    await _answer(slack, scripted(script, chunk=10, chunk_delay=0.01), tmp_path)
    assert [_shown(m) for m in slack.bot_messages("C1")] == [ANSWER]


async def test_a_run_cut_off_mid_stream_answers_once_after_restart(slack: FakeSlack, tmp_path: Path) -> None:
    """The process stops mid-stream (effects open, transcript unsaved): the next run removes the partial
    message, is told so, and answers once; the thread holds one answer."""
    hold = asyncio.Event()
    prompts: list[str] = []

    async def first_script(turn: Turn) -> list[Any]:
        return [ANSWER]

    def stop_after_first_append(c: Call) -> None:
        if c.method == "chat.appendStream":
            hold.set()

    slack.observe(stop_after_first_append)
    slack.hold("chat.stopStream")
    model = scripted(first_script, chunk=8, chunk_delay=0.05)
    app = AppHarness(slack, model=model, data_dir=tmp_path, lease_ttl=0.5, shutdown_grace=0.0)
    await app.start()
    _fast_flush(app)
    root = await _mention(app)
    await asyncio.wait_for(hold.wait(), 20)
    await app.stop()  # cancels the run mid-answer, as a crash would leave it
    slack.release("chat.stopStream")
    partial = [_shown(m) for m in slack.bot_messages("C1")]
    assert len(partial) == 1 and partial[0] != ANSWER

    def second_script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text=ANSWER)]
        return [""]

    await asyncio.sleep(0.6)  # the first process's lease expires (LEASE_TTL)
    async with AppHarness(slack, model=scripted(second_script), data_dir=tmp_path, lease_ttl=0.5) as again:
        assert again.service is not None
        await again.service.runner.sweep()
        await again.idle()
    assert [_shown(m) for m in slack.bot_messages("C1")] == [ANSWER]
    assert _shown(slack.messages("C1", root)[-1]) == ANSWER
    assert any("cut off while being written and removed" in p for p in prompts)


async def test_a_long_answer_is_split_like_a_post_and_each_part_can_be_edited(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """A streamed answer over the post limit ends as exactly split_markdown's parts, one message each, each
    with its own handle: editing the second part changes that message only."""
    from channel.markdown import split_markdown

    sections = [
        f"## Part {n}\n\n" + ("All work and no play makes a dull answer. " * 60).strip() for n in range(5)
    ]
    long_answer = "\n\n".join(sections)
    expected = split_markdown(long_answer, 8000)
    assert len(expected) >= 2

    parts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return [call("channel_reply", text=long_answer)]
        last = turn.results[-1][0] if turn.results else ""
        if last == "channel_reply":
            parts.extend(turn.results[-1][1]["parts"])
            return [call("tool_search", query="edit a message")]
        if last == "tool_search":
            return [call("channel_edit", message=parts[1], text="second part, edited")]
        return [""]

    await _answer(slack, scripted(script, chunk=400, chunk_delay=0.005), tmp_path)
    shown = [_shown(m) for m in slack.bot_messages("C1")]
    assert shown == [expected[0], "second part, edited", *expected[2:]]
    assert len(set(parts)) == len(expected)
    assert slack.count("chat.startStream") >= 1


KILLED_ANSWER = "The launch moves to March 3rd. " * 12


def _kill_script(request: dict[str, Any]) -> Reply:
    """Answer every prompt (the mention, and the resumed run's) with the same channel_reply."""
    messages = request.get("messages") or [{}]
    if messages[-1].get("role") == "tool":
        return FakeOpenAI.text("")
    return FakeOpenAI.tool_call("channel_reply", {"text": KILLED_ANSWER})


@pytest.mark.process
async def test_sigkill_mid_stream_then_restart_leaves_one_answer(slack: FakeSlack, tmp_path: Path) -> None:
    """SIGKILL while an append is in flight: the restarted process removes the partial message (the
    model reads that it was cut off) and the thread ends with exactly one whole answer."""
    async with FakeOpenAI(_kill_script) as llm, aiohttp.ClientSession() as http:
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.api_url,
            "DATA_DIR": str(tmp_path / "data"),
            "MODEL": "openai-chat:fake",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "x",
            "LEASE_TTL": "2",
            "SWEEP_INTERVAL": "0.5",
        }
        first = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server1.log")
        await first.start()
        slack.hold("chat.appendStream")
        root = slack.add_message("C1", "<@UBOT> when is the launch?", user="U1")
        mention = events.app_mention("C1", "U1", "<@UBOT> when is the launch?", root)
        assert (
            await events.deliver(http, f"{first.url}/slack/events", mention, SIGNING_SECRET)
        ).status == 200
        await asyncio.wait_for(slack.held("chat.appendStream").wait(), 20)
        first.kill()
        await first.wait()
        slack.release("chat.appendStream")
        [partial] = slack.bot_messages("C1")
        assert "metadata" not in partial  # never stopped: a fragment

        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server2.log")
        await second.start()
        try:
            await eventually(
                lambda: any("cut off while being written" in last_user_text(r) for r in llm.requests)
            )
            await eventually(
                lambda: [m.get("metadata") is not None for m in slack.bot_messages("C1")] == [True]
            )
        finally:
            await second.stop()
        assert [_shown(m) for m in slack.bot_messages("C1")] == [KILLED_ANSWER]


async def test_a_message_steered_in_after_a_streamed_reply_gets_its_answer_streamed_once(
    tmp_path: Path,
) -> None:
    """Streaming on: the model replies (streamed), a second message is steered in, the model answers it
    with final text: the thread ends with both answers once each, and nothing else of the bot's."""
    replied = asyncio.Event()
    second_in = asyncio.Event()

    async def script(turn: Turn) -> list[Any]:
        if "second question" in turn.prompt:
            return ["Answer two: " + ANSWER]
        if turn.prompt:
            return [call("channel_reply", text="Answer one: " + ANSWER)]
        replied.set()
        await second_in.wait()
        return ["done"]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script, chunk=20), data_dir=tmp_path) as app:
            _fast_flush(app)
            root = await _mention(app)
            await replied.wait()
            ts = slack.add_message("C1", "second question", user="U1", thread_ts=root)
            assert (
                await app.deliver(events.message("C1", "U1", "second question", ts, thread_ts=root))
            ).status == 200
            second_in.set()
            await app.idle()
        shown = [_shown(m) for m in slack.bot_messages("C1")]
        streams = slack.count("chat.startStream")
    assert shown == ["Answer one: " + ANSWER, "Answer two: " + ANSWER], shown
    assert streams == 2  # the second answer streamed as it was written, like the first
