"""Fencing and step checkpoints in the store (invariants 12 and 13), on every backend."""

from __future__ import annotations

import asyncio

import pytest

from storage.base import Fence, LeaseMoved, Store

T0 = 1_700_000_000.0


async def _task(store: Store) -> str:
    return (await store.create_task(channel="C1", thread_ts="900.000001", now=T0)).task_id


async def _claim(store: Store, ts: str) -> int:
    outcome = await store.claim_message(
        event_id=f"Ev{ts}", channel="C1", ts=ts, thread_ts="900.000001", create=True, payload="{}", now=T0
    )
    assert outcome.item_id is not None
    return outcome.item_id


async def _moved(store: Store, task_id: str) -> tuple[Fence, Fence]:
    """An old acquisition (A's, expired) and the new one (B's) that took the lease over."""
    old = await store.take_lease(task_id, owner="A", ttl=10, now=T0)
    new = await store.take_lease(task_id, owner="B", ttl=10, now=T0 + 11)
    assert old is not None and new is not None and old.token != new.token
    return old, new


async def test_every_durable_write_of_a_run_is_refused_once_its_lease_has_moved(store: Store) -> None:
    """Checkpoint, journal open and close, save and inbox consumption under a moved lease are refused
    (LeaseMoved) and change nothing; the new owner's writes go through."""
    task_id = await _task(store)
    item = await _claim(store, "900.000001")
    old, new = await _moved(store, task_id)
    await store.open_effect(
        effect_id="e1", task_id=task_id, tool="channel_reply", args="{}", now=T0, fence=new
    )
    with pytest.raises(LeaseMoved):
        await store.open_effect(
            effect_id="e2", task_id=task_id, tool="channel_reply", args="{}", now=T0, fence=old
        )
    with pytest.raises(LeaseMoved):
        await store.close_effect("e1", result="{}", fence=old)
    with pytest.raises(LeaseMoved):
        await store.checkpoint(task_id, transcript=b"[]", consumed=[item], fence=old, close=("e1", "{}"))
    with pytest.raises(LeaseMoved):
        await store.save_run(task_id, transcript=b"[]", consumed=[item], fence=old)
    assert await store.get_effect("e2") is None
    assert [e.effect_id for e in await store.open_effects(task_id)] == ["e1"]
    assert [i.item_id for i in await store.pending_inbox(task_id)] == [item]
    task = await store.get_task(task_id)
    assert task is not None and task.transcript == b"" and not task.run_open
    await store.checkpoint(task_id, transcript=b"[1]", consumed=[item], fence=new, close=("e1", '{"ok":1}'))
    assert await store.open_effects(task_id) == [] and await store.pending_inbox(task_id) == []


async def test_a_checkpoint_keeps_the_run_open_until_it_is_saved(store: Store) -> None:
    """A checkpointed run makes its task due (it is resumed after a crash) until save_run closes it,
    and its journal entries carry the tool call that made them."""
    task_id = await _task(store)
    fence = await store.take_lease(task_id, owner="A", ttl=10, now=T0)
    assert fence is not None
    await store.open_effect(
        effect_id="e1",
        task_id=task_id,
        tool="channel_reply",
        args="{}",
        now=T0,
        call_id="call_1",
        fence=fence,
    )
    await store.checkpoint(task_id, transcript=b"[1]", consumed=[], fence=fence, close=("e1", "{}"))
    await store.release_lease(task_id, owner="A")
    assert task_id in await store.tasks_needing_a_run(now=T0 + 1)
    task = await store.get_task(task_id)
    assert task is not None and task.run_open and task.transcript == b"[1]"
    [effect] = await store.call_effects(task_id)
    assert (effect.call_id, effect.state) == ("call_1", "done")
    await store.save_run(task_id, transcript=b"[2]", consumed=[])
    assert task_id not in await store.tasks_needing_a_run(now=T0 + 1)


async def test_an_owner_extending_its_live_lease_keeps_its_fence(store: Store) -> None:
    """Re-acquiring one's own live lease keeps the fence (the run's writes stay valid); a free or
    expired lease taken again, even by the same owner, gets a new one."""
    task_id = await _task(store)
    first = await store.take_lease(task_id, owner="A", ttl=10, now=T0)
    again = await store.take_lease(task_id, owner="A", ttl=10, now=T0 + 5)
    assert first is not None and again == first
    later = await store.take_lease(task_id, owner="A", ttl=10, now=T0 + 20)
    assert later is not None and later.token != first.token
    assert await store.renew_lease(task_id, owner="A", ttl=10, now=T0 + 21, fence=later)
    assert not await store.renew_lease(task_id, owner="A", ttl=10, now=T0 + 21, fence=first)


async def test_a_takeover_waits_for_a_fenced_write_in_flight(store_factory) -> None:  # type: ignore[no-untyped-def]
    """Racing a new owner's acquisition against the old owner's fenced saves from another store
    object: every save either lands before the takeover or is refused, never after it."""
    stores = [await store_factory(), await store_factory()]
    task_id = await _task(stores[0])
    old = await stores[0].take_lease(task_id, owner="A", ttl=10, now=T0)
    assert old is not None

    async def save(n: int) -> bool:
        try:
            await stores[0].save_run(task_id, transcript=str(n).encode(), consumed=[], fence=old)
        except LeaseMoved:
            return False
        return True

    saves = [asyncio.create_task(save(n)) for n in range(20)]
    new = await stores[1].take_lease(task_id, owner="B", ttl=10, now=T0 + 11)
    assert new is not None
    after = await save(99)
    await asyncio.gather(*saves)
    assert not after
    await stores[1].save_run(task_id, transcript=b"B", consumed=[], fence=new)
    task = await stores[0].get_task(task_id)
    assert task is not None and task.transcript == b"B"
