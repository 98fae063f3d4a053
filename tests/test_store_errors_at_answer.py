"""A store error at the end of a run (the answer's checkpoint, its journal entry, the save) stops the
run the way a lost lease does: nothing more posted by that attempt, no apology, the message not
consumed; the scheduler takes the conversation up again after a back-off, from its last checkpoint,
and the answer the model wrote is posted once.

Each run here goes through a :class:`~app.runs.scheduler.Scheduler` on each store with a scripted model;
the store's failures are injected by wrapping its methods (as ``tests/test_held_checkpoint.py`` does)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.runs import checkpoint as checkpoint_module
from app.runs import scheduler as scheduler_module
from app.runs.outcome import APOLOGY
from app.runs.scheduler import Scheduler
from channel.contract import Origin
from channel.fake import FakeAdapter
from storage.base import Store, StoreError
from tests.support.models import Turn
from tests.support.runs import scripted_executor

ANSWER = "Here is the answer the model wrote."


def _failing(
    store: Store,
    name: str,
    times: int,
    log: list[str],
    when: Callable[..., bool],
    message: str = "terminating connection due to administrator command",
) -> None:
    """``store.name`` raises StoreError on its first ``times`` calls that ``when`` accepts."""
    real: Callable[..., Awaitable[Any]] = getattr(store, name)
    left = [times]

    async def write(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0 and when(*args, **kwargs):
            left[0] -= 1
            log.append(f"{name} failed")
            raise StoreError(message)
        return await real(*args, **kwargs)

    setattr(store, name, write)


def _answer_checkpoint(*_: Any, transcript: bytes = b"", **__: Any) -> bool:
    return b"threadbound_answer" in transcript


async def _answered(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: Callable[[Store, list[str]], None]
) -> tuple[FakeAdapter, list[str], list[int]]:
    """One message answered through a scheduler on ``store``, failing as ``fail`` arranges; the
    adapter, what happened in order, the inbox items pending at each model request."""
    monkeypatch.setattr(scheduler_module, "DRIVER_RETRY_S", 0.05)
    monkeypatch.setattr(checkpoint_module, "ANSWER_CHECKPOINT_PAUSE", 0.0)
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "please help")
    claimed = await store.claim_message(
        event_id="Ev1",
        channel="general",
        ts=root.ts,
        thread_ts=root.ts,
        create=True,
        payload=json.dumps({"text": "please help", "author": "Alice", "user": "U1"}),
        now=time.time(),
    )
    assert claimed.task_id is not None
    task_id = claimed.task_id
    log: list[str] = []
    asked: list[int] = []
    post = adapter.post

    async def posting(*args: Any, **kwargs: Any) -> Any:
        pending = await store.pending_inbox(task_id)
        task = await store.get_task(task_id)
        log.append(f"post pending={len(pending)} open={task is not None and task.run_open}")
        return await post(*args, **kwargs)

    adapter.post = posting  # type: ignore[method-assign]
    fail(store, log)

    async def script(turn: Turn) -> list[Any]:
        asked.append(len(await store.pending_inbox(task_id)))  # the message, unless consumed
        log.append("model")
        return [ANSWER]

    executor = scripted_executor(store, adapter, script, tmp_path / "data")
    scheduler = Scheduler(store=store, executor=executor, owner="A")
    try:
        scheduler.notify(task_id)

        for _ in range(500):
            task = await store.get_task(task_id)
            if not scheduler._drivers and task is not None and not task.run_open:
                if not await store.pending_inbox(task_id):
                    break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"the message was never answered: {log}")
    finally:
        await scheduler.shutdown(1.0)
    return adapter, log, asked


def _replies(adapter: FakeAdapter) -> list[str]:
    return [m.text for m in adapter.messages if m.text != "please help"]


async def test_a_failed_journal_entry_of_the_answer_posts_the_checkpointed_answer_once(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer's journal entry fails once: that attempt posts nothing (no apology); the resumed
    run finds the answer in its checkpoint and posts it, without asking the model again."""
    adapter, log, asked = await _answered(
        store,
        tmp_path,
        monkeypatch,
        lambda store, log: _failing(store, "open_effect", 1, log, lambda **_: True),
    )
    assert _replies(adapter) == [ANSWER], log
    assert APOLOGY not in _replies(adapter)
    assert asked == [1], log  # the checkpoint held the answer: the model is not asked again
    assert log.index("open_effect failed") < log.index("post pending=0 open=True"), log


async def test_an_answer_checkpoint_failing_once_keeps_the_answer(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer's checkpoint fails once: it is written again, and the answer posted once; the
    message is consumed with that checkpoint, never before the answer is kept."""
    adapter, log, asked = await _answered(
        store,
        tmp_path,
        monkeypatch,
        lambda store, log: _failing(store, "checkpoint", 1, log, _answer_checkpoint),
    )
    assert _replies(adapter) == [ANSWER], log
    assert asked == [1], log


async def test_a_store_down_at_the_answer_leaves_the_message_and_answers_it_later(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every try of the answer's checkpoint in the first run fails (a store that stays down): the
    run posts nothing, the message stays in the inbox, and the conversation is taken up again after
    a back-off and answered once; no apology."""
    tries = checkpoint_module.ANSWER_CHECKPOINT_TRIES
    adapter, log, asked = await _answered(
        store,
        tmp_path,
        monkeypatch,
        lambda store, log: _failing(store, "checkpoint", tries, log, _answer_checkpoint),
    )
    assert _replies(adapter) == [ANSWER], log
    assert log.count("checkpoint failed") == tries
    assert log[: tries + 1] == ["model", *["checkpoint failed"] * tries], log
    # The first answer never reached the store: the message stayed in the inbox, asked again.
    assert asked == [1, 1], log


async def test_a_failed_save_after_the_answer_is_not_answered_again(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save after the posted answer fails: no apology, the answer is not posted again, and the
    resumed run closes the conversation."""
    adapter, log, asked = await _answered(
        store,
        tmp_path,
        monkeypatch,
        lambda store, log: _failing(store, "save_run", 1, log, lambda *_, **__: True),
    )
    assert _replies(adapter) == [ANSWER], log
    assert asked == [1], log


async def _replying(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: Callable[[Store, list[str]], None]
) -> tuple[FakeAdapter, list[str], list[Any]]:
    """One message answered with channel_reply through a scheduler on ``store``, failing as ``fail``
    arranges, by a model that replies again in other words when a result says the reply failed. The
    adapter, what failed, the error results the model read."""
    from tests.support.models import call

    monkeypatch.setattr(scheduler_module, "DRIVER_RETRY_S", 0.05)
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "please help")
    claimed = await store.claim_message(
        event_id="Ev1",
        channel="general",
        ts=root.ts,
        thread_ts=root.ts,
        create=True,
        payload=json.dumps({"text": "please help", "author": "Alice", "user": "U1"}),
        now=time.time(),
    )
    assert claimed.task_id is not None
    log: list[str] = []
    told: list[Any] = []
    fail(store, log)

    async def script(turn: Turn) -> list[Any]:
        errors = [r for _, r in turn.results if isinstance(r, dict) and "error" in r]
        told.extend(errors)
        if turn.step == 0:
            return [call("channel_reply", text=ANSWER)]
        if errors:
            return [call("channel_reply", text="Trying again: " + ANSWER)]
        return [""]

    executor = scripted_executor(store, adapter, script, tmp_path / "data")
    scheduler = Scheduler(store=store, executor=executor, owner="A")
    try:
        scheduler.notify(claimed.task_id)
        for _ in range(500):
            task = await store.get_task(claimed.task_id)
            idle = not scheduler._drivers and task is not None and not task.run_open
            if idle and not await store.pending_inbox(claimed.task_id):
                break
            await asyncio.sleep(0.02)
    finally:
        await scheduler.shutdown(1.0)
    return adapter, log, told


async def test_a_reply_whose_journal_entry_cannot_be_closed_is_not_posted_again(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """channel_reply posts, then closing its journal entry fails (and its one retry): the model reads
    that it was posted, not "it may not have happened" — one reply in the thread."""
    adapter, log, _ = await _replying(
        store,
        tmp_path,
        monkeypatch,
        lambda store, log: _failing(store, "close_effect", 2, log, lambda *_, **__: True),
    )
    assert "close_effect failed" in log
    assert _replies(adapter) == [ANSWER], log


async def test_a_store_error_in_a_tool_stops_the_run_instead_of_telling_the_model(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening channel_reply's journal entry fails (a statement that fails, not a session that ended):
    the model is never told "internal storage error, it may not have happened"; the run stops like a
    lost lease, the resumed run tells the model the call was interrupted before it wrote anything,
    and one reply reaches the thread."""
    timeout = "canceling statement due to statement timeout"
    adapter, log, told = await _replying(
        store,
        tmp_path,
        monkeypatch,
        lambda store, log: _failing(store, "open_effect", 1, log, lambda *_, **__: True, message=timeout),
    )
    assert "open_effect failed" in log
    # The resumed run asks the model again from its last checkpoint, or tells it the truth: the call
    # was cut off before it wrote anything. Never "internal storage error" (tool_failed).
    assert all(r["error"]["code"] == "interrupted" for r in told), told
    assert len(_replies(adapter)) == 1, _replies(adapter)
