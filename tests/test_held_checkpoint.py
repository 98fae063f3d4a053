"""A step's held checkpoint (app.runs.checkpoint): a response calling only the run's own tools is
checkpointed with the step's first journal entry, before any tool that writes outside the journal,
or before the next model request — never after something a rerun from the previous checkpoint
would repeat, and never after a newer checkpoint or the save.

The crash matrix (tests/test_crash_matrix.py) kills a served app at every store and Slack point of
these paths; here each write path is checked for the order of its writes in one process."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart

from app.runs.checkpoint import Checkpoints
from channel.contract import Origin
from channel.fake import FakeAdapter
from storage import open_store
from storage.base import InboxItem, Store
from tests.support.models import Turn, call
from tests.support.runs import scripted_executor

#: Store writes whose order the run tests record (``name>`` when made, ``name<`` when done).
WRITES = ("checkpoint", "record_usage", "open_effect", "close_effect", "save_run", "schedule_follow_up")


def _recorded(store: Store, log: list[str]) -> None:
    for name in WRITES:
        real: Callable[..., Awaitable[Any]] = getattr(store, name)

        async def write(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            log.append(f"{_name}>")
            try:
                return await _real(*args, **kwargs)
            finally:
                log.append(f"{_name}<")

        setattr(store, name, write)


async def _run(
    tmp_path: Path, script: Callable[[Turn, list[str]], list[Any]]
) -> tuple[list[str], Store, str]:
    """One run of ``script`` (given the writes so far) on a claimed question; the writes made, the
    store (still open: the caller closes it) and the task id."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "please help")
    post = adapter.post
    log: list[str] = []

    async def posting(*args: Any, **kwargs: Any) -> Any:
        log.append("post")
        return await post(*args, **kwargs)

    adapter.post = posting  # type: ignore[method-assign]
    store = open_store(f"sqlite:///{tmp_path}/held.db")
    await store.migrate()
    outcome = await store.claim_message(
        event_id="Ev1",
        channel="general",
        ts=root.ts,
        thread_ts=root.ts,
        create=True,
        payload=json.dumps({"text": "please help", "author": "Alice", "user": "U1"}),
        now=time.time(),
    )
    assert outcome.task_id is not None
    [item] = await store.pending_inbox(outcome.task_id)
    _recorded(store, log)

    async def nothing_new() -> list[InboxItem]:
        return []

    executor = scripted_executor(store, adapter, lambda turn: script(turn, log), tmp_path / "data")
    result = await executor.run_inbox(outcome.task_id, [item], [], nothing_new)
    assert result.status == "ok", result
    return log, store, outcome.task_id


async def test_a_reply_steps_checkpoint_and_usage_go_with_its_journal_entry(tmp_path: Path) -> None:
    """The step calling channel_reply writes nothing before the reply's journal entry; then the
    checkpoint, the usage row and the entry are made together (one SQLite transaction, the
    checkpoint first) and the post comes after all three."""

    def script(turn: Turn, log: list[str]) -> list[Any]:
        return [call("channel_reply", text="on it")] if turn.step == 0 else [""]

    log, store, task_id = await _run(tmp_path, script)
    try:
        # All three made before any is done: one batch of the store's, one trip to its thread.
        assert log[:3] == ["checkpoint>", "record_usage>", "open_effect>"], log
        assert log.index("post") > max(log.index("checkpoint<"), log.index("open_effect<")), log
        assert log.count("checkpoint>") == 1 and log.count("record_usage>") == 2, log
        task = await store.get_task(task_id)
        assert task is not None and not task.run_open and b"on it" in task.transcript
    finally:
        await store.close()


async def test_a_step_that_only_read_is_checkpointed_before_the_next_model_request(tmp_path: Path) -> None:
    """channel_read writes nothing a rerun repeats: its step's checkpoint is held through the read
    and written before the model is asked again, so a crash during that request resumes with it."""
    seen: list[list[str]] = []

    def script(turn: Turn, log: list[str]) -> list[Any]:
        seen.append(list(log))
        if turn.step == 0:
            return [call("channel_read")]
        return [call("channel_reply", text="read it")] if turn.step == 1 else [""]

    log, store, _ = await _run(tmp_path, script)
    try:
        assert "checkpoint>" not in seen[0]
        assert "checkpoint<" in seen[1] and "open_effect>" not in seen[1], seen[1]
        assert log.count("checkpoint>") == 2, log  # the read step's, then the reply step's
    finally:
        await store.close()


@pytest.mark.parametrize("with_reply", [False, True], ids=["alone", "beside-a-reply"])
async def test_a_tool_writing_outside_the_journal_waits_for_the_held_checkpoint(
    tmp_path: Path, with_reply: bool
) -> None:
    """A follow-up is a write of its own (no journal entry): the step's checkpoint is in before it
    is scheduled — alone in its response, or beside a reply (run at the same time) that took the
    held checkpoint along with its entry."""

    def script(turn: Turn, log: list[str]) -> list[Any]:
        if turn.step == 0:
            return [call("tool_search", query="remind me later follow-up", limit=3)]
        if turn.step == 1:
            reply = [call("channel_reply", text="will do")] if with_reply else []
            return [*reply, call("channel_follow_up", after="20m", note="check the deploy")]
        return [""]

    log, store, task_id = await _run(tmp_path, script)
    try:
        scheduled = log.index("schedule_follow_up>")
        # The tool_search step's checkpoint (written before tool_search ran), then this step's.
        assert log.index("checkpoint<", log.index("checkpoint<") + 1) < scheduled, log
        assert len(await store.task_follow_ups(task_id)) == 1
    finally:
        await store.close()


async def test_a_no_reply_step_is_saved_by_the_run_without_its_held_checkpoint(tmp_path: Path) -> None:
    """no_reply ends the turn: the held checkpoint is superseded by the save (written after it, it
    would reopen the run with an older transcript); its usage row is stored with the save."""

    def script(turn: Turn, log: list[str]) -> list[Any]:
        return [call("no_reply")]

    log, store, task_id = await _run(tmp_path, script)
    try:
        assert "checkpoint>" not in log, log
        assert log.index("record_usage>") < log.index("save_run<"), log
        task = await store.get_task(task_id)
        assert task is not None and not task.run_open and b"no_reply" in task.transcript
        assert await store.tokens_spent(time.strftime("%Y-%m-%d", time.gmtime())) > 0
    finally:
        await store.close()


# -- Checkpoints alone --------------------------------------------------------------------------


class _SlowStore:
    """Just ``checkpoint``, taking a while, with the order of writes logged."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def checkpoint(self, task_id: str, **_: Any) -> None:
        self.log.append("checkpoint>")
        await asyncio.sleep(0.02)
        self.log.append("checkpoint<")


def _messages() -> list[Any]:
    return [
        ModelRequest(parts=[UserPromptPart("hi")]),
        ModelResponse(parts=[ToolCallPart("channel_reply", {"text": "x"}, "c1")]),
    ]


async def _logged(log: list[str], name: str, seconds: float = 0.0) -> str:
    log.append(f"{name}>")
    await asyncio.sleep(seconds)
    log.append(f"{name}<")
    return name


def _checkpoints(log: list[str]) -> Checkpoints:
    return Checkpoints(_SlowStore(log), "T1", fence=None, prefix=0, consumed=[1])  # type: ignore[arg-type]


async def test_a_write_made_while_another_carries_the_held_checkpoint_waits_for_it() -> None:
    log: list[str] = []
    checkpoints = _checkpoints(log)
    checkpoints.hold(_messages(), lambda: _logged(log, "usage"))

    async def other_tool() -> None:
        await asyncio.sleep(0)  # the first call has taken the held writes along by now
        await checkpoints.settle()
        log.append("follow_up")

    first, _ = await asyncio.gather(checkpoints.with_held_checkpoint(_logged(log, "entry")), other_tool())
    assert first == "entry"
    assert log[:3] == ["checkpoint>", "usage>", "entry>"], log
    assert log.index("follow_up") > log.index("checkpoint<"), log


async def test_a_failed_held_checkpoint_is_carried_again_by_the_write_that_waits_for_it() -> None:
    """The write carrying the held checkpoint failed (a failover ended its session): the checkpoint
    is held again, and a write that waited for it carries it; the first write fails."""
    log: list[str] = []
    checkpoints = _checkpoints(log)
    attempts: list[int] = []

    async def flaky(task_id: str, **_: Any) -> None:
        attempts.append(1)
        await asyncio.sleep(0.01)
        if len(attempts) == 1:
            raise RuntimeError("session ended")
        log.append("checkpoint")

    checkpoints.store.checkpoint = flaky  # type: ignore[method-assign]
    checkpoints.hold(_messages())
    carried = asyncio.ensure_future(checkpoints.with_held_checkpoint(_logged(log, "entry")))
    await asyncio.sleep(0)
    assert await checkpoints.with_held_checkpoint(_logged(log, "follow_up")) == "follow_up"
    assert len(attempts) == 2 and "checkpoint" in log, log
    assert log.index("follow_up>") > log.index("entry<")  # never before the first attempt ended
    with pytest.raises(RuntimeError, match="session ended"):
        await carried
    await checkpoints.settle()
    assert len(attempts) == 2  # written: nothing held any more


async def test_a_held_checkpoint_failing_again_fails_the_write_that_carries_it() -> None:
    log: list[str] = []
    checkpoints = _checkpoints(log)

    async def failing(task_id: str, **_: Any) -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("disk full")

    checkpoints.store.checkpoint = failing  # type: ignore[method-assign]
    checkpoints.hold(_messages())
    carried = asyncio.ensure_future(checkpoints.with_held_checkpoint(_logged(log, "entry")))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="disk full"):
        await checkpoints.with_held_checkpoint(_logged(log, "follow_up"))
    with pytest.raises(RuntimeError):
        await carried
    with pytest.raises(RuntimeError, match="disk full"):  # still held: the next model request tries
        await checkpoints.settle()


async def test_a_newer_checkpoint_supersedes_the_held_one_and_keeps_its_writes() -> None:
    log: list[str] = []
    checkpoints = _checkpoints(log)
    checkpoints.hold(_messages(), lambda: _logged(log, "usage"))
    done = await checkpoints.with_held_checkpoint(_logged(log, "save"), supersedes=True)
    assert done == "save"
    assert "checkpoint>" not in log and log.count("usage>") == 1 and "save<" in log, log
    await checkpoints.settle()  # nothing held any more
    assert "checkpoint>" not in log


async def test_holding_again_keeps_the_earlier_writes() -> None:
    log: list[str] = []
    checkpoints = _checkpoints(log)
    checkpoints.hold(_messages(), lambda: _logged(log, "usage1"))
    checkpoints.hold([*_messages(), ModelResponse(parts=[TextPart("more")])], lambda: _logged(log, "usage2"))
    await checkpoints.settle()
    assert log.count("checkpoint>") == 1 and "usage1<" in log and "usage2<" in log, log


async def test_a_write_cancelled_while_it_waits_for_the_held_checkpoint_stays_cancelled() -> None:
    """Cancelled while it waits for the write carrying the held checkpoint (the run ends), a write
    is cancelled, not turned into a second attempt at the checkpoint."""
    log: list[str] = []
    checkpoints = _checkpoints(log)
    checkpoints.hold(_messages())
    carried = asyncio.ensure_future(checkpoints.with_held_checkpoint(_logged(log, "entry")))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(checkpoints.with_held_checkpoint(_logged(log, "follow_up")))
    await asyncio.sleep(0.005)
    checkpoints.hold(_messages())  # a newer step's checkpoint held meanwhile
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await carried == "entry"
    assert "follow_up>" not in log and log.count("checkpoint>") == 1, log
