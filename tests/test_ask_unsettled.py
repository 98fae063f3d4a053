"""An ask whose card may be in the thread is never decided nor reported failed while nobody can tell:
its card posted but not recorded (a store error), or its post answered ambiguously and the look at
the thread failed. The run stops and the task is taken up again; the resumed run finds the card by
its effect id, so the person sees one card and their answer reaches the model — end to end against
the emulator over real HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from app.runs import scheduler as scheduler_module
from storage.base import StoreError
from tests.support.harness import AppHarness
from tests.support.models import scripted
from tests.support.waiting import eventually
from tests.test_ask import AskTwiceScript, _card, _cards, _replies, _say, _settle, _start
from threadbound_emulator import FakeSlack


async def _open_asks(app: AppHarness, root: str) -> list[Any]:
    assert app.service is not None
    task_id = await app.service.store.find_task("C1", root)
    assert task_id is not None
    return await app.service.store.open_asks(task_id)


async def _card_known(app: AppHarness, root: str) -> Any:
    """The task's one open ask, once its card is recorded and no journal entry is open (the resumed
    run settled the card), polled."""
    assert app.service is not None
    store = app.service.store
    for _ in range(400):
        task_id = await store.find_task("C1", root)
        asks = await store.open_asks(task_id) if task_id else []
        if task_id and len(asks) == 1 and asks[0].card_ts and not await store.open_effects(task_id):
            return asks[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the card was never recorded")


async def test_a_card_posted_but_not_journalled_is_asked_once(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails the journal entry of a question whose card is already in the thread: the model
    is not told "it may not have happened" (it would ask again, leaving two live cards); the run stops,
    the resumed run finds the card and reads "asked", and the person's answer reaches the model."""
    monkeypatch.setattr(scheduler_module, "DRIVER_RETRY_S", 0.05)
    script = AskTwiceScript()
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, approval_ttl=600) as app:
        assert app.service is not None
        store = app.service.store
        real_close = store.close_effect
        failed: list[str] = []

        async def close_effect(effect_id: str, **kwargs: Any) -> Any:
            if '"status": "asked"' in kwargs.get("result", "") and not failed:
                failed.append(effect_id)
                raise StoreError("database is locked")
            return await real_close(effect_id, **kwargs)

        monkeypatch.setattr(store, "close_effect", close_effect)
        root = await _start(app, slack)
        ask = await _card_known(app, root)  # the resumed run found the card
        await _settle(app)
        assert failed
        [card] = _cards(slack)
        await _say(app, slack, "U1", "Call it Zephyr", root)
    [asked] = script.asked.values()
    assert asked == {"question": ask.ask_id, "status": "asked"}  # the call's result, as the journal has it
    [answered] = script.prompts
    assert f"Alice answered {ask.ask_id}: Call it Zephyr" in answered
    assert "<@U1> answered *Call it Zephyr*" in json.dumps(_card(slack, card["ts"])["blocks"])
    assert len(_cards(slack)) == 1 and _replies(slack) == ["got it"]


async def test_an_ambiguous_card_whose_look_failed_stays_open_until_it_can_be_told(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slack posts the card but the answer is lost, and the look at the thread fails too: the ask is
    not decided "expired" (the person can see the card) and the model is not told it failed; the task
    is taken up again, looks again once the thread can be read, finds the card, and the person's
    answer reaches the model. One card, no "nobody answered" turn."""
    monkeypatch.setattr(scheduler_module, "DRIVER_RETRY_S", 0.05)
    script = AskTwiceScript()
    real_call = script.__call__

    def faulty(turn: Any) -> list[Any]:
        reply = real_call(turn)
        if any(getattr(c, "tool_name", "") == "channel_ask" for c in reply) and not slack.count(
            "chat.postMessage"
        ):
            slack.drop("chat.postMessage")  # applied, then the connection cut: an ambiguous answer
            slack.fail("conversations.replies", "internal_error", status=500, times=None)
        return reply

    async with AppHarness(slack, model=scripted(faulty), data_dir=tmp_path, approval_ttl=600) as app:
        assert app.service is not None
        root = await _start(app, slack)
        [card] = _cards(slack)
        looks = slack.count("conversations.replies")
        await eventually(lambda: slack.count("conversations.replies") > looks)  # looked again, in vain
        [ask] = await _open_asks(app, root)
        assert script.asked == {}  # open, and the model told nothing yet
        slack.clear_faults("conversations.replies")
        assert (await _card_known(app, root)).ask_id == ask.ask_id  # looked again: found
        await _settle(app)
        await _say(app, slack, "U1", "Call it Zephyr", root)
        app.service.approvals.clock = lambda: time.time() + 601
        await app.service.runner.sweep()
        await _settle(app)
    [asked] = script.asked.values()
    assert asked == {"question": ask.ask_id, "status": "asked"}
    [answered] = script.prompts
    assert f"Alice answered {ask.ask_id}: Call it Zephyr" in answered
    assert len(_cards(slack)) == 1 and _card(slack, card["ts"])["ts"] == card["ts"]
    assert _replies(slack) == ["got it"]
