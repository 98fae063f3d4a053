"""The run's first look at its inbox (before its first model request) goes to the store only when a
delivery woke the task since the driver read the inbox; every later look always goes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.runs.outcome import Inbox, RunOutcome
from app.runs.scheduler import Scheduler
from channel.contract import AdapterBase
from storage import open_store
from storage.base import InboxItem, Store

T0 = 1_000.0


class _Looks:
    """An executor stand-in that looks at its inbox twice, as a run's first two steps do, and
    consumes what it was given (plus anything the looks found)."""

    def __init__(self, store: Store, arrive: str = "") -> None:
        self.store = store
        self.adapter = AdapterBase()  # names no message without a look: no early handle
        self.arrive = arrive  # a message delivered (and the task woken) before the first look
        self.scheduler: Scheduler | None = None
        self.looks: list[list[str]] = []

    async def run_inbox(
        self, task_id: str, items: Sequence[InboxItem], effects: Any, inbox: Inbox, **_: Any
    ) -> RunOutcome:
        if self.arrive:
            await _claim(self.store, self.arrive)
            assert self.scheduler is not None
            self.scheduler.notify(task_id)
            self.arrive = ""
        consumed = [i.item_id for i in items]
        for _look in range(2):
            found = list(await inbox())
            self.looks.append([i.ts for i in found])
            consumed += [i.item_id for i in found]
        await self.store.save_run(task_id, transcript=b"[]", consumed=sorted(set(consumed)))
        return RunOutcome(task_id, "ok", False)


async def _claim(store: Store, ts: str) -> str:
    outcome = await store.claim_message(
        event_id=f"Ev{ts}", channel="C1", ts=ts, thread_ts="900.000001", create=True, payload="{}", now=T0
    )
    assert outcome.task_id is not None
    return outcome.task_id


async def _drive(tmp_path: Path, arrive: str) -> list[list[str]]:
    store = open_store(f"sqlite:///{tmp_path}/looks.db")
    await store.migrate()
    try:
        task_id = await _claim(store, "900.000001")
        executor = _Looks(store, arrive)
        scheduler = Scheduler(store=store, executor=executor)  # type: ignore[arg-type]
        executor.scheduler = scheduler
        scheduler.notify(task_id)
        await scheduler.idle()
        assert await store.pending_inbox(task_id) == []
        return executor.looks
    finally:
        await store.close()


async def test_a_run_nothing_woke_skips_its_first_inbox_look(tmp_path: Path) -> None:
    # The first look finds nothing without asking the store (the run was just given its items);
    # the second asks, and finds only the item the run was given (still pending until it saves).
    assert await _drive(tmp_path, arrive="") == [[], ["900.000001"]]


async def test_a_delivery_that_woke_the_running_task_is_seen_at_the_first_look(tmp_path: Path) -> None:
    # Steering: a message claimed (and its task woken) after the run read its inbox reaches the
    # run at its first look, before the first model request.
    looks = await _drive(tmp_path, arrive="900.000002")
    assert looks[0] == ["900.000001", "900.000002"]
