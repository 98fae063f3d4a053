"""The store's asks (issue 24): questions and approvals the agent asked, decided once, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from storage.base import Store
from tests.support.asks import question

T0 = 1_700_000_000.0
StoreFactory = Callable[..., Awaitable[Store]]


async def _open(
    store: Store, ask_id: str = "q_one", *, now: float = T0, options: tuple[str, ...] = ()
) -> str:
    task = await store.create_task(channel="C1", thread_ts="500.000001", now=T0)
    await store.open_ask(
        question(task.task_id, ask_id, created_at=now, options=options, thread_ts="500.000001")
    )
    return task.task_id


async def test_an_open_ask_does_not_hold_its_task(store: Store) -> None:
    """An open ask is listed as the task's, keeps its options, and leaves the task's inbox due."""
    task_id = await _open(store, options=("staging", "prod"))
    [ask] = await store.open_asks(task_id)
    assert (ask.ask_id, ask.options, ask.only_requester, ask.decision) == (
        "q_one",
        ("staging", "prod"),
        True,
        None,
    )
    await store.set_ask_card("q_one", "600.000001")
    assert (await store.get_ask("q_one")).card_ts == "600.000001"  # type: ignore[union-attr]
    assert await store.tasks_needing_a_run(now=T0 + 1) == []
    assert await store.get_ask("q_other") is None


async def test_the_first_answer_wins_and_appends_one_item(store: Store) -> None:
    """Of two answers only the first counts and appends its payload; an empty payload appends nothing."""
    task_id = await _open(store)
    won = await store.decide_ask(
        "q_one", decision="answered", answer="staging", user_id="U1", payload='{"k": 1}', now=T0 + 5
    )
    lost = await store.decide_ask(
        "q_one", decision="answered", answer="prod", user_id="U2", payload='{"k": 2}', now=T0 + 6
    )
    assert (won, lost) == (True, False)
    ask = await store.get_ask("q_one")
    assert ask is not None and (ask.decision, ask.answer, ask.decided_by, ask.decided_at) == (
        "answered",
        "staging",
        "U1",
        T0 + 5,
    )
    [item] = await store.pending_inbox(task_id)
    assert item.payload == '{"k": 1}'
    assert await store.open_asks(task_id) == []
    await _open(store, "q_two")
    assert await store.decide_ask("q_two", decision="answered", answer="x", user_id="U1", payload="", now=T0)
    assert len(await store.pending_inbox(task_id)) == 1


async def test_expired_asks_are_listed_oldest_first(store: Store) -> None:
    """Open asks older than the cutoff are listed; decided ones are not."""
    await _open(store, "q_old", now=T0)
    await _open(store, "q_new", now=T0 + 100)
    assert [a.ask_id for a in await store.expired_asks(before=T0 + 50)] == ["q_old"]
    await store.decide_ask("q_old", decision="expired", answer="", user_id="", payload="", now=T0 + 60)
    assert [a.ask_id for a in await store.expired_asks(before=T0 + 500)] == ["q_new"]


async def test_concurrent_answers_yield_one_winner(store_factory: StoreFactory) -> None:
    """Answers racing on two connections (two instances): exactly one wins and one item is appended."""
    first, second = await store_factory(), await store_factory()
    task_id = await _open(first)
    results = await asyncio.gather(
        *(
            s.decide_ask("q_one", decision="answered", answer=a, user_id="U1", payload=a, now=T0)
            for s, a in [(first, "a"), (second, "b")] * 4
        )
    )
    assert sorted(results) == [False] * 7 + [True]
    assert len(await first.pending_inbox(task_id)) == 1
