"""The store's stops and agent-session titles, on every backend (the ``store`` fixture)."""

from __future__ import annotations

import pytest

from storage import LeaseMoved, Store
from tests.test_store_contract import T0, claim


async def test_a_stop_is_recorded_only_while_a_run_holds_the_lease(store: Store) -> None:
    """A Stop between runs records nothing; during a run it records the newest inbox item as ``upto``."""
    outcome = await claim(store)
    task_id = outcome.task_id
    assert task_id is not None
    assert await store.request_stop("C1", "100.000001", by_user="U1", now=T0) is None
    fence = await store.take_lease(task_id, owner="a", ttl=60, now=T0)
    assert fence is not None
    assert await store.request_stop("C1", "100.000001", by_user="U1", now=T0 + 1) == task_id
    assert await store.request_stop("C1", "100.000001", by_user="U2", now=T0 + 2) is None  # one waits
    stop = await store.stop_of(task_id)
    assert stop is not None and stop.by_user == "U1"
    [item] = await store.pending_inbox(task_id)
    assert stop.upto == item.item_id
    assert [s.task_id for s in await store.stops_of([task_id, "other"])] == [task_id]
    assert (await store.run_state(task_id)).stop == stop
    assert await store.request_stop("C9", "1.0", by_user="U1", now=T0) is None  # no such conversation


async def test_settling_a_stop_consumes_the_stopped_turn_only(store: Store) -> None:
    """Settling consumes the items up to ``upto``, closes the run and open effects, removes the stop;
    a message that came after the Stop stays pending. Fenced: a moved lease settles nothing."""
    task_id = (await claim(store)).task_id
    assert task_id is not None
    fence = await store.take_lease(task_id, owner="a", ttl=60, now=T0)
    assert await store.request_stop("C1", "100.000001", by_user="U1", now=T0 + 1) == task_id
    await claim(store, event_id="Ev2", ts="100.000002", now=T0 + 2)
    await store.release_lease(task_id, owner="a")
    other = await store.take_lease(task_id, owner="b", ttl=60, now=T0 + 3)
    with pytest.raises(LeaseMoved):
        await store.settle_stop(task_id, transcript=b"[]", fence=fence)
    assert await store.stop_of(task_id) is not None
    assert await store.settle_stop(task_id, transcript=b"[]", fence=other)
    assert await store.stop_of(task_id) is None
    assert [i.ts for i in await store.pending_inbox(task_id)] == ["100.000002"]
    task = await store.get_task(task_id)
    assert task is not None and task.transcript == b"[]" and not task.run_open


async def test_session_titles_follow_renames(store: Store) -> None:
    """A session's title is stored, and a rename by conversation keeps it in step."""
    task_id = (await claim(store)).task_id
    assert task_id is not None
    assert await store.session_title(task_id) == ""
    await store.set_session_title(task_id, "First", now=T0)
    assert await store.rename_session("C1", "100.000001", "Renamed", now=T0 + 1) == task_id
    assert await store.session_title(task_id) == "Renamed"
    assert await store.rename_session("C1", "999.0", "Nobody", now=T0) is None
