"""A streamed answer's messages are found by a resumed run however late they started.

Messages streamed while the model writes are journalled before any tool call exists: under the
answer's own key, which the step's checkpoint (or the answer's marker) names. A message that starts
after the checkpoint was taken (Slack slow to start the stream, a later part) is thus still found;
the crash matrix (``stream-slow``, ``stream-reply-slow`` rows) shows it across a real SIGKILL.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from app.runs.checkpoint import STREAMED_KEY, tag_streamed
from app.runs.resume import OpenAnswer, answer_reached, resume
from channel.slack.adapter import MAX_POST_CHARS
from channel.slack.inbound import inbound_message
from storage import Store, TaskRecord
from tests.support.sessions import SessionEnv, slack_session
from threadbound_emulator import FakeSlack


def _thread(slack: FakeSlack) -> str:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    return slack.add_message("C1", "<@UBOT> how much?", user="U1")


@asynccontextmanager
async def _streaming(tmp_path: Path) -> AsyncIterator[tuple[FakeSlack, SessionEnv]]:
    """A session in a thread of C1 streaming its answers (each flush at once)."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            recipient = inbound_message({"user": "U1", "team": "T1", "ts": root})
            assert env.session.stream_answers(recipient, interval=0.0)
            yield slack, env


async def test_a_stream_journals_what_it_starts_outside_a_call_under_its_key(tmp_path: Path) -> None:
    """The first message starts while no call is handled: journalled under the answer's key; the
    second part, started by the reply's call as it finishes, under the call's id."""
    answer = "word " * (MAX_POST_CHARS // 5 + 200)
    async with _streaming(tmp_path) as (slack, env):
        session = env.session
        session.stream_text("call:c1", "word word ")
        await slack.wait_for_calls("chat.startStream")
        assert session.answer is not None
        key = session.answer.key
        result = await session.call("channel_reply", {"text": answer}, call_id="c1")
        assert len(result["parts"]) == 2, result
        entries = [e for e in await env.store.call_effects(env.task.task_id) if e.tool == "channel_reply"]
        assert [e.call_id for e in entries] == [key, "c1"]
        assert [json.loads(e.result or "{}").get("message") for e in entries] == result["parts"]


async def _journalled(store: Store, task: TaskRecord, call_id: str, message: str) -> str:
    """A done channel_reply entry of ``task`` under ``call_id`` that posted ``message``; its id."""
    effect_id = f"e-{message}"
    await store.open_effect(
        effect_id=effect_id,
        task_id=task.task_id,
        tool="channel_reply",
        args=json.dumps({"part": 0, "stream": True}),
        now=time.time(),
        call_id=call_id,
        fence=None,
    )
    await store.close_effect(effect_id, result=json.dumps({"message": message}), fence=None)
    return effect_id


def _checkpointed(task: TaskRecord, names: list[str]) -> TaskRecord:
    """``task`` checkpointed after a response calling channel_reply (``c1``) whose text streamed,
    the step naming ``names`` for it."""
    call = ToolCallPart("channel_reply", {"text": "the answer"}, tool_call_id="c1")
    messages = [ModelRequest(parts=[UserPromptPart("how much?")]), ModelResponse(parts=[call])]
    if names:
        messages[-1] = replace(messages[-1], metadata={STREAMED_KEY: {"c1": names}})
    return replace(task, transcript=ModelMessagesTypeAdapter.dump_json(messages))


def _result(task: TaskRecord) -> object:
    last = ModelMessagesTypeAdapter.validate_json(task.transcript)[-1]
    assert isinstance(last, ModelRequest)
    [part] = last.parts
    assert isinstance(part, ToolReturnPart) and part.tool_call_id == "c1"
    return part.content


async def test_a_resumed_reply_is_answered_from_its_streamed_answers_key(tmp_path: Path) -> None:
    """The checkpoint names the key: the call is answered with the streamed message journalled
    under it and the part its own call posted; without the name it wrote nothing (and would be
    asked again: the hole the key closes)."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            await _journalled(env.store, env.task, "stream:k1", "msg_a")
            await _journalled(env.store, env.task, "c1", "msg_b")
            await _journalled(env.store, env.task, "stream:other", "msg_c")
            task, _ = await resume(env.store, _checkpointed(env.task, ["stream:k1"]))
            content = _result(task)
            assert isinstance(content, dict)
            assert content["message"] == "msg_a" and content["parts"] == ["msg_a", "msg_b"]
            task, _ = await resume(env.store, _checkpointed(env.task, []))
            assert _result(task) == {
                "message": "msg_b",
                "note": "posted before your run was interrupted",
            }


async def test_a_checkpoint_naming_entries_by_id_still_resumes(tmp_path: Path) -> None:
    """A checkpoint written by an earlier version names the streamed entries by id."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            effect_id = await _journalled(env.store, env.task, "", "msg_a")
            task, _ = await resume(env.store, _checkpointed(env.task, [effect_id]))
            content = _result(task)
            assert isinstance(content, dict) and content["message"] == "msg_a"


async def test_an_open_answer_is_answered_by_a_message_under_its_streams_key(tmp_path: Path) -> None:
    """The answer's marker names the stream's key: a message started before the marker existed
    counts as the answer posted; another answer's key does not."""
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            await _journalled(env.store, env.task, "stream:k1", "msg_a")

            async def reached(*names: str) -> object:
                answer = OpenAnswer("the answer", "answer:m1", names)
                return await answer_reached(env.store, env.task.task_id, answer)

            assert await reached("stream:k1") == (0, None)
            assert await reached("stream:k2") is None
            assert await reached() is None


def test_only_the_first_streamed_reply_call_is_tagged_even_before_a_message_started() -> None:
    """The step is tagged from the sources alone (no message needs to exist yet), for one call: the
    first streamed reply, which finishes the answer; another reply call posts on its own."""
    first = ToolCallPart("channel_reply", {"text": "a"}, tool_call_id="c1")
    second = ToolCallPart("channel_reply", {"text": "b"}, tool_call_id="c2")
    messages: list[ModelMessage] = [ModelResponse(parts=[first, second])]
    assert tag_streamed(messages, ["text:1:0", "call:c2", "call:c1"], "stream:k1") == "c1"
    assert messages[0].metadata == {STREAMED_KEY: {"c1": ["stream:k1"]}}
    read = [ModelResponse(parts=[ToolCallPart("channel_read", {}, tool_call_id="c3")])]
    assert tag_streamed(read, ["call:c1"], "stream:k1") == "" and read[0].metadata is None


async def test_of_two_streamed_reply_calls_only_the_owner_finishes_the_answer(tmp_path: Path) -> None:
    """Both calls' text streamed; whichever runs first, the stream is the named call's and the other
    reply is posted on its own, so each call's journal entries are its own."""
    async with _streaming(tmp_path) as (slack, env):
        session = env.session
        session.stream_text("call:c1", "first reply ")
        session.stream_text("call:c2", "second reply ")
        await slack.wait_for_calls("chat.startStream")
        assert session.answer is not None and session.answer.owner == "c1"
        session.answer.own("c2")
        one = await session.call("channel_reply", {"text": "first reply"}, call_id="c1")
        two = await session.call("channel_reply", {"text": "second reply"}, call_id="c2")
        assert slack.count("chat.postMessage") == 1 and slack.count("chat.stopStream") == 1
        entries = {e.call_id: e for e in await env.store.call_effects(env.task.task_id)}
        assert json.loads(entries["c1"].result or "{}")["message"] == one["message"]
        stream_key = next(k for k in entries if k.startswith("stream:"))
        assert json.loads(entries[stream_key].result or "{}")["message"] == two["message"]


async def test_a_part_slack_cut_short_is_finished_from_where_its_message_stops(tmp_path: Path) -> None:
    """A streamed message Slack ended early records how much of its part it holds; resumed, the reply
    gets the rest of that part as a new message (and nothing it showed again)."""
    text = "the first words and then the rest of the answer"
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            effect_id = await _journalled(env.store, env.task, "c1", "msg_a")
            await env.store.close_effect(
                effect_id,
                result=json.dumps({"message": "msg_a", "chars": len("the first words ")}),
                fence=None,
            )
            call = ToolCallPart("channel_reply", {"text": text}, tool_call_id="c1")
            messages = [ModelRequest(parts=[UserPromptPart("how much?")]), ModelResponse(parts=[call])]
            task = replace(env.task, transcript=ModelMessagesTypeAdapter.dump_json(messages))
            task, _ = await resume(env.store, task, env.session.post_rest)
            content = _result(task)
            assert isinstance(content, dict) and content["parts"][0] == "msg_a" and len(content["parts"]) == 2
            [posted] = slack.bot_messages("C1")
            assert posted["text"] == "and then the rest of the answer"
            # Resumed again (a second crash): the rest is journalled as the call's now, not posted twice.
            again = replace(env.task, transcript=ModelMessagesTypeAdapter.dump_json(messages))
            await resume(env.store, again, env.session.post_rest)
            assert len(slack.bot_messages("C1")) == 1


async def test_a_message_whose_stream_broke_records_how_much_of_its_part_it_holds(tmp_path: Path) -> None:
    """Appending failed (not a closed stream): the message keeps what it showed, the rest of the part
    is posted after it, and the first message's entry says how much of the part it holds — so a
    crash before that post has the rest posted as the run resumes, not lost."""
    first = "the first words "
    async with _streaming(tmp_path) as (slack, env):
        session = env.session
        session.stream_text("call:c1", first)
        await slack.wait_for_calls("chat.startStream")
        slack.fail("chat.appendStream", "invalid_blocks", times=None)
        result = await session.call("channel_reply", {"text": first + "and the rest"}, call_id="c1")
        assert len(result["parts"]) == 2
        entries = [e for e in await env.store.call_effects(env.task.task_id) if e.tool == "channel_reply"]
        closes = [json.loads(e.result or "{}") for e in entries]
        assert closes[0].get("chars") == len(first) and "chars" not in closes[1], closes
