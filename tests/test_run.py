"""One agent run (app.run) without the scheduler: steering comes only from the Inbox it is handed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from app.agent.usage import Budgets
from app.runs.limits import RunLimits
from app.runs.resume import replied_since_prompt
from app.settings import Settings
from channel.contract import Origin
from channel.fake import FakeAdapter
from storage import open_store
from storage.base import InboxItem, Store, UsageRecord
from tests.support.days import days_ahead
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.runs import scripted_executor
from tests.support.steering import reply_while_held
from threadbound_emulator import FakeSlack


async def _claim(store: Store, thread_ts: str, ts: str, text: str, *, create: bool = False) -> InboxItem:
    outcome = await store.claim_message(
        event_id=f"Ev{ts}",
        channel="general",
        ts=ts,
        thread_ts=thread_ts,
        create=create,
        payload=json.dumps({"text": text, "author": "Alice"}),
        now=time.time(),
    )
    assert outcome.status == "claimed" and outcome.task_id
    [item] = [i for i in await store.pending_inbox(outcome.task_id) if i.item_id == outcome.item_id]
    return item


@dataclass
class _Thread:
    """A thread with one claimed question, and the inbox a run is handed (``supplied`` only)."""

    adapter: FakeAdapter
    root: Any
    store: Store
    first: InboxItem
    supplied: list[InboxItem] = field(default_factory=list)

    async def inbox(self) -> Sequence[InboxItem]:
        return list(self.supplied)

    async def later(self, ts: str, text: str) -> InboxItem:
        """Claim a message in the thread (pending in the store, not handed to a run)."""
        return await _claim(self.store, self.root.ts, ts, text)

    async def pending(self) -> list[str]:
        return [json.loads(i.payload)["text"] for i in await self.store.pending_inbox(self.first.task_id)]


@contextlib.asynccontextmanager
async def _thread(tmp_path: Path) -> AsyncIterator[_Thread]:
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "first question")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        yield _Thread(
            adapter, root, store, await _claim(store, root.ts, root.ts, "first question", create=True)
        )
    finally:
        await store.close()


async def test_a_run_steers_in_what_its_inbox_supplies_and_nothing_else(tmp_path: Path) -> None:
    """Messages the Inbox callable supplies mid-run reach the model before its next request and are
    consumed with the run; a message that is only in the store stays pending for the next run."""
    async with _thread(tmp_path) as thread:
        prompts: list[str] = []

        async def script(turn: Turn) -> list[Any]:
            prompts.append(turn.prompt)
            if len(prompts) == 1:
                # Two messages arrive while the model works; the inbox hands over only the first.
                thread.supplied.append(await thread.later("2.0", "second thought"))
                await thread.later("3.0", "left for later")
                return [call("channel_reply", text="on it")]
            return [""]

        executor = scripted_executor(thread.store, thread.adapter, script, tmp_path / "data")
        first = thread.first
        outcome = await executor.run_inbox(first.task_id, [first], [], thread.inbox)

        assert outcome.status == "ok" and outcome.replied
        assert "first question" in prompts[0] and "second thought" in prompts[1]
        assert not any("left for later" in p for p in prompts)
        assert outcome.consumed == [first.item_id, thread.supplied[0].item_id]
        assert await thread.pending() == ["left for later"]
        assert thread.adapter.thread(Origin("general", thread.root.ts))[-1].text == "on it"


async def test_a_message_steered_in_while_the_model_chose_no_reply_is_left_for_the_next_run(
    tmp_path: Path,
) -> None:
    """A message arrives while the model writes a response that ends the turn (``no_reply``): the
    model never saw it, so the run does not consume it; it stays in the inbox for the next run
    (it was consumed unseen, and so lost, before)."""
    async with _thread(tmp_path) as thread:
        prompts: list[str] = []

        async def script(turn: Turn) -> list[Any]:
            prompts.append(turn.prompt)
            thread.supplied.append(await thread.later("2.0", "second thought"))
            return [call("no_reply")]

        executor = scripted_executor(thread.store, thread.adapter, script, tmp_path / "data")
        first = thread.first
        outcome = await executor.run_inbox(first.task_id, [first], [], thread.inbox)

        assert outcome.status == "ok" and not outcome.replied
        assert len(prompts) == 1 and "second thought" not in prompts[0]
        assert outcome.consumed == [first.item_id]
        assert await thread.pending() == ["second thought"]
        task = await thread.store.get_task(first.task_id)
        assert task is not None and b"second thought" not in task.transcript


async def test_a_message_steered_in_while_the_model_chose_no_reply_is_answered_by_the_next_run(
    tmp_path: Path,
) -> None:
    """The whole app: Alice asks, the model chooses ``no_reply`` while Bob writes in the thread; Bob's
    message starts the next run, which answers it."""
    prompts: list[str] = []
    first = asyncio.Event()
    proceed = asyncio.Event()

    async def brain(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
        if len(prompts) == 1 and turn.prompt:
            first.set()
            await proceed.wait()
            return [call("no_reply")]
        if "bob asks" in turn.prompt:
            return [call("channel_reply", text="answer for bob")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        async with AppHarness(slack, model=scripted(brain), data_dir=tmp_path, stream="off") as app:
            _, texts = await reply_while_held(
                app, slack, first, proceed, "<@UBOT> alice thinks aloud", "bob asks a question"
            )
    assert "bob asks" not in prompts[0] and any("bob asks" in p for p in prompts[1:])
    assert texts == ["answer for bob"]


async def _steered_after_reply(tmp_path: Path, answer: str, *, early: bool = False) -> list[str]:
    """Alice asks; the model replies with channel_reply ("answer one"); a second message is steered
    in (after the reply, or, ``early``, while the model writes it) and the model answers it with the
    final text ``answer``. Returns the thread's texts."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "first question")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        first = await _claim(store, root.ts, root.ts, "first question", create=True)
        supplied: list[InboxItem] = []

        async def inbox() -> Sequence[InboxItem]:
            return list(supplied)

        async def script(turn: Turn) -> list[Any]:
            if "second thought" in turn.prompt:
                return [answer]
            if turn.prompt:
                if early:
                    supplied.append(await _claim(store, root.ts, "2.0", "second thought"))
                return [call("channel_reply", text="answer one")]
            if not supplied:
                supplied.append(await _claim(store, root.ts, "2.0", "second thought"))
            return ["done"]  # after its reply: no answer (not posted), and the turn would end here

        executor = scripted_executor(store, adapter, script, tmp_path / "data")
        outcome = await executor.run_inbox(first.task_id, [first], [], inbox)
        assert outcome.status == "ok" and outcome.consumed == [first.item_id, supplied[0].item_id]
        return [m.text for m in adapter.thread(Origin("general", root.ts))]
    finally:
        await store.close()


async def test_a_message_steered_in_after_the_reply_gets_its_final_text_answer(tmp_path: Path) -> None:
    """The model replied, then a message is steered in and answered with final text: that answer is
    posted, once; the text the model ended its reply with ("done") is not."""
    texts = await _steered_after_reply(tmp_path, "answer two")
    assert texts == ["first question", "answer one", "answer two"]


async def test_a_message_steered_in_with_the_replys_result_gets_its_final_text_answer(tmp_path: Path) -> None:
    """Steered in while the model wrote its reply, the message reaches it with the reply's result: the
    reply was not its answer, the final text is."""
    texts = await _steered_after_reply(tmp_path, "answer two", early=True)
    assert texts == ["first question", "answer one", "answer two"]


async def test_a_final_text_repeating_the_reply_is_not_posted_twice_after_steering(tmp_path: Path) -> None:
    """The model answers the steered message by repeating the reply it posted: posted once only."""
    texts = await _steered_after_reply(tmp_path, "answer one")
    assert texts == ["first question", "answer one"]


def test_a_resumed_run_knows_a_prompt_sent_with_a_replys_result_is_unanswered() -> None:
    """A transcript whose last request carries a reply's result and a message steered in with it: the
    reply was made before the model saw that message, so the resumed run has not replied to it."""
    reply = ToolCallPart("channel_reply", {"text": "answer one"}, tool_call_id="c1")
    posted = ToolReturnPart("channel_reply", {"message": "msg_1"}, tool_call_id="c1")
    before = [ModelRequest(parts=[UserPromptPart("first question")]), ModelResponse(parts=[reply])]
    with_prompt = [*before, ModelRequest(parts=[posted, UserPromptPart("second thought")])]
    after_prompt = [*before, ModelRequest(parts=[posted])]
    assert not replied_since_prompt(ModelMessagesTypeAdapter.dump_json(with_prompt))
    assert replied_since_prompt(ModelMessagesTypeAdapter.dump_json(after_prompt))


async def test_an_over_budget_person_is_told_once_a_run_whether_waiting_or_steered_in(tmp_path: Path) -> None:
    """Bob (past his budget) wrote beside Alice before the run, and writes again while it runs: his
    messages are not shown, and he gets the budget note once in the run, not once per screening."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "alice asks")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        for day in days_ahead():  # over budget on whichever day the run checks it
            await store.record_usage(UsageRecord(day=day, person="U2", channel="general", input_tokens=500))

        async def claim(ts: str, user: str, text: str, *, create: bool = False) -> InboxItem:
            outcome = await store.claim_message(
                event_id=f"Ev{ts}",
                channel="general",
                ts=ts,
                thread_ts=root.ts,
                create=create,
                payload=json.dumps({"text": text, "author": user, "user": user}),
                now=time.time(),
            )
            assert outcome.task_id
            return next(i for i in await store.pending_inbox(outcome.task_id) if i.item_id == outcome.item_id)

        alice = await claim(root.ts, "U1", "alice asks", create=True)
        bob = await claim("2.0", "U2", "bob says one")
        supplied: list[InboxItem] = []
        prompts: list[str] = []

        async def inbox() -> Sequence[InboxItem]:
            return list(supplied)

        async def script(turn: Turn) -> list[Any]:
            prompts.append(turn.prompt)
            if len(prompts) == 1:
                supplied.append(await claim("3.0", "U2", "bob says two"))
                return [call("channel_reply", text="answer")]
            return [""]

        executor = scripted_executor(
            store, adapter, script, tmp_path / "data", budgets=Budgets(store, per_user=100)
        )
        outcome = await executor.run_inbox(alice.task_id, [alice, bob], [], inbox)
        texts = [m.text for m in adapter.thread(Origin("general", root.ts))]
    finally:
        await store.close()
    assert outcome.status == "ok" and outcome.consumed == [alice.item_id, bob.item_id, supplied[0].item_id]
    assert not any("bob says" in p for p in prompts)
    assert sum("500 of your 100 daily model tokens" in t for t in texts) == 1, texts
    assert "answer" in texts


def test_a_runs_limits_are_read_from_their_settings() -> None:
    """RUN_TIMEOUT, HISTORY_LIMIT, TASK_FILES_MAX_BYTES and FOLLOW_UPS_MAX, each to its limit."""
    values = {"run_timeout": 12.5, "history_limit": 34, "task_files_max_bytes": 56, "follow_ups_max": 78}
    settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    assert RunLimits.of(settings) == RunLimits(
        run_timeout=12.5, history_limit=34, files_max_bytes=56, follow_ups_max=78
    )
