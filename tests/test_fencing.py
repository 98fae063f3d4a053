"""Fencing, step checkpoints and liveness in the store and the scheduler (invariants 10, 12 and 13)."""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

from app.runs.checkpoint import synced_by_next_write
from app.runs.lease import Lease
from app.runs.limits import RunLimits
from app.runs.outcome import RunOutcome, RunStopped
from app.runs.scheduler import Scheduler
from app.runs.takeover import CONFIRM_S
from channel.contract import AdapterBase, Origin
from channel.fake import FakeAdapter
from channel.slack.adapter import SlackAdapter
from storage import open_store
from storage.base import Fence, InboxItem, InstanceLook, LeaseMoved, Store
from storage.sqlite import SQLiteStore
from tests.support.models import Turn, call
from tests.support.runs import scripted_executor
from tests.support.sessions import identity_of
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

T0 = 1_700_000_000.0


async def _task(store: Store) -> str:
    return (await store.create_task(channel="C1", thread_ts="900.000001", now=T0)).task_id


async def _claim(store: Store, ts: str) -> int:
    outcome = await store.claim_message(
        event_id=f"Ev{ts}", channel="C1", ts=ts, thread_ts="900.000001", create=True, payload="{}", now=T0
    )
    assert outcome.item_id is not None
    return outcome.item_id


async def _question(store: Store, root_ts: str) -> str:
    """Alice's "question" at ``root_ts`` claimed as a new conversation: its task's id."""
    outcome = await store.claim_message(
        event_id="Ev1", channel="general", ts=root_ts, thread_ts=root_ts, create=True,
        payload=json.dumps({"text": "question", "author": "Alice"}), now=T0,
    )  # fmt: skip
    assert outcome.task_id is not None
    return outcome.task_id


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


async def test_an_owner_is_judged_dead_only_after_its_lock_stays_missing_for_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a database restart ends every instance's liveness lock at once (Postgres), an owner
    whose lock is missing, and which this instance never saw alive under its own lock, is taken
    over only when it has not taken its lock again within the grace."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.migrate()
    try:
        clock = [T0]
        task_id = await _task(store)
        assert await store.take_lease(task_id, owner="B", ttl=600, now=T0)
        missing = ["B"]

        async def look_at_instances(owner: str, *, now: float) -> InstanceLook:
            assert owner == "A"
            return InstanceLook(7, frozenset(["A"]), tuple(missing))

        monkeypatch.setattr(store, "look_at_instances", look_at_instances)
        monkeypatch.setattr(store, "liveness_grace", 12.0)
        scheduler = Scheduler(store=store, executor=cast(Any, None), owner="A", clock=lambda: clock[0])
        assert await scheduler.take_over() == 0  # missing since T0: B may be re-registering
        clock[0] = T0 + 6
        missing.clear()  # B took its lock again
        assert await scheduler.take_over() == 0
        missing.append("B")  # missing again, first seen at T0 + 13
        clock[0] = T0 + 13
        assert await scheduler.take_over() == 0
        clock[0] = T0 + 24
        assert await scheduler.take_over() == 0
        lease = await store.get_lease(task_id)
        assert lease is not None and lease.owner == "B" and lease.expires_at > clock[0]
        clock[0] = T0 + 25
        assert await scheduler.take_over() == 1
        lease = await store.get_lease(task_id)
        assert lease is not None and lease.expires_at <= clock[0]
    finally:
        await store.close()


async def test_an_owner_seen_alive_under_our_own_lock_is_dead_once_its_lock_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner this instance saw alive while holding its own lock, whose lock then goes while ours
    stays held (so the database did not end every session), is taken over at the confirming look,
    well inside the grace."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.migrate()
    try:
        clock = [T0]
        task_id = await _task(store)
        assert await store.take_lease(task_id, owner="B", ttl=600, now=T0)
        looks = [InstanceLook(7, frozenset(["A", "B"]), ())]

        async def look_at_instances(owner: str, *, now: float) -> InstanceLook:
            return looks[-1]

        monkeypatch.setattr(store, "look_at_instances", look_at_instances)
        monkeypatch.setattr(store, "liveness_grace", 12.0)
        scheduler = Scheduler(store=store, executor=cast(Any, None), owner="A", clock=lambda: clock[0])
        assert await scheduler.take_over() == 0
        looks.append(InstanceLook(7, frozenset(["A"]), ("B",)))  # B was SIGKILLed
        clock[0] = T0 + 1
        assert await scheduler.take_over() == 0  # first seen missing: confirmed at the next look
        clock[0] = T0 + 1 + CONFIRM_S
        assert await scheduler.take_over() == 1
        lease = await store.get_lease(task_id)
        assert lease is not None and lease.expires_at <= clock[0]
    finally:
        await store.close()


async def test_a_run_whose_lease_moved_mid_run_commits_nothing_more_and_posts_nothing_more(
    tmp_path: Path,
) -> None:
    """A new owner takes the lease while the model works (no guard says so): the old run's next
    checkpoint is refused by the store, the run stops without posting or saving, and its inbox item
    stays for the new owner."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "question")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        task_id = await _question(store, root.ts)
        items = await store.pending_inbox(task_id)
        fence = await store.take_lease(task_id, owner="A", ttl=10, now=T0)
        assert fence is not None

        requests: list[Turn] = []

        async def script(turn: Turn) -> list[Any]:
            requests.append(turn)
            if len(requests) == 1:
                assert await store.take_lease(task_id, owner="B", ttl=10, now=T0 + 11)
                return [call("channel_reply", text="the old owner's reply")]
            return [""]

        executor = scripted_executor(store, adapter, script, tmp_path / "data")

        async def inbox() -> list[InboxItem]:
            return []

        result = await executor.run_inbox(task_id, items, [], inbox, fence=fence)
        assert result.status == "stopped"
        assert [m.text for m in adapter.thread(Origin("general", root.ts))] == ["question"]
        assert [i.item_id for i in await store.pending_inbox(task_id)] == [i.item_id for i in items]
        task = await store.get_task(task_id)
        assert task is not None and task.transcript == b"" and not task.run_open
    finally:
        await store.close()


async def test_a_write_held_by_rate_limits_is_abandoned_once_its_lease_moved(
    store: Store, slack: FakeSlack, tmp_path: Path
) -> None:
    """A reply answered 429 (Retry-After) waits in the outbound path; meanwhile another owner takes
    the lease and Slack would take the post now. The retry re-checks the lease against the store
    (its last confirmation is stale by then) and abandons the write: nothing reaches the emulator,
    nothing is recorded as posted, and the run ends stopped, without an apology."""
    root = slack.add_message("C1", "question", user="U1")
    payload = json.dumps({"text": "question", "author": "Alice"})
    claimed = await store.claim_message(
        event_id="Ev1", channel="C1", ts=root, thread_ts=root, create=True, payload=payload, now=time.time()
    )
    task_id = claimed.task_id
    assert task_id is not None
    skew = [0.0]  # the store's clock as the old owner sees it: moved on when the lease moves

    def clock() -> float:
        return time.time() + skew[0]

    fence = await store.take_lease(task_id, owner="A", ttl=10, now=clock())
    assert fence is not None
    lease = Lease(store, task_id, owner="A", ttl=10, clock=clock, fence=fence)
    identity = identity_of(slack)
    adapter = SlackAdapter(
        token=slack.token, api_url=slack.api_url, identity=identity, file_origins=[slack.files_origin]
    )

    async def script(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="the old owner's reply")] if turn.step == 0 else [""]

    executor = scripted_executor(store, adapter, script, tmp_path / "data")
    slack.fail("chat.postMessage", error="ratelimited", retry_after=1, times=None)
    try:
        items = await store.pending_inbox(task_id)
        inbox = partial(store.pending_inbox, task_id)
        run = asyncio.create_task(
            executor.run_inbox(task_id, items, [], inbox, guard=lease.check, fence=fence)
        )
        await eventually(lambda: slack.count("chat.postMessage") >= 1)
        assert await store.take_lease(task_id, owner="B", ttl=10, now=clock() + 11)
        skew[0] = 5.0  # A's last confirmation is now older than a check trusts
        slack.clear_faults("chat.postMessage")  # Slack would take the post now
        result = await asyncio.wait_for(run, 20)
    finally:
        await adapter.close()
    assert result.status == "stopped"
    assert slack.count("chat.postMessage") == 1  # the retry was never made
    assert slack.bot_messages("C1") == []  # neither the reply nor an apology
    assert [e.tool for e in await store.open_effects(task_id)] == ["channel_reply"]  # not recorded as posted


async def test_a_wake_up_during_the_drivers_last_look_is_not_lost(tmp_path: Path) -> None:
    """A message claimed while the driver's last look at the inbox runs (on Postgres that look may
    read a snapshot older than the message) is still run by that driver, not left for the sweep."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.migrate()
    try:
        first = await _claim(store, "900.000001")
        task_id = await store.find_task("C1", "900.000001")
        assert task_id is not None
        runs: list[list[int]] = []

        class Executor:
            adapter = AdapterBase()  # names no message without a look: no early handle

            async def run_inbox(
                self, task_id: str, items: Any, effects: Any, inbox: Any, **_: Any
            ) -> RunOutcome:
                runs.append([i.item_id for i in items])
                await store.save_run(task_id, transcript=b"", consumed=[i.item_id for i in items])
                return RunOutcome(task_id, "ok", True)

            async def waiting(self, task_id: str) -> bool:
                return False

        scheduler = Scheduler(store=store, executor=cast(Any, Executor()), owner="A")
        look = store.pending_inbox
        late: list[int] = []

        async def pending_inbox(task_id: str) -> list[InboxItem]:
            found = await look(task_id)
            if not found and not late and await store.get_lease(task_id) is None:
                late.append(await _claim(store, "900.000002"))  # after this look read the inbox
                scheduler.notify(task_id)
            return found

        store.pending_inbox = pending_inbox  # type: ignore[method-assign]
        scheduler.notify(task_id)
        await scheduler.idle()
        assert runs == [[first], late]
    finally:
        await store.close()


async def test_describing_the_conversation_counts_to_the_runs_time(tmp_path: Path) -> None:
    """A conversation look-up that never answers ends the run at RUN_TIMEOUT (an apology, the
    message consumed) instead of holding the conversation and its slot forever."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "question")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        task_id = await _question(store, root.ts)

        async def never(origin: Origin) -> Any:
            await asyncio.Event().wait()

        adapter.describe = never  # type: ignore[method-assign]
        executor = scripted_executor(
            store, adapter, lambda turn: [""], tmp_path / "data", limits=RunLimits(run_timeout=0.5)
        )

        async def inbox() -> list[InboxItem]:
            return []

        items = await store.pending_inbox(task_id)
        result = await asyncio.wait_for(executor.run_inbox(task_id, items, [], inbox), 30)
        assert result.status == "failed"
        assert await store.pending_inbox(task_id) == []
    finally:
        await store.close()


async def test_a_lease_check_asks_the_store_after_a_few_seconds_not_half_a_lease(store: Store) -> None:
    """With a long LEASE_TTL, a check four seconds after the store last confirmed the lease asks the
    store again and finds it moved (not after half the TTL): the run stops before its next write."""
    task_id = await _task(store)
    fence = await store.take_lease(task_id, owner="A", ttl=600, now=T0)
    assert fence is not None
    clock = [T0]
    lease = Lease(store, task_id, owner="A", ttl=600, clock=lambda: clock[0], fence=fence)
    await lease.check()  # just confirmed: no store trip needed
    await store.expire_leases("A", now=T0 + 1)  # judged dead (wrongly), its lease taken
    assert await store.take_lease(task_id, owner="B", ttl=600, now=T0 + 1)
    clock[0] = T0 + 4
    with pytest.raises(RunStopped):
        await lease.check()


async def test_only_a_checkpoint_before_another_tool_than_the_runs_own_is_synced_itself(
    tmp_path: Path,
) -> None:
    """A checkpoint before the run's own tools (they journal a write before making it, and that
    journal entry is synced) or before a final answer (posted through the journal) needs no sync of
    its own; one before any other tool (an MCP server's, which acts on its own) is synced itself."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "question")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    synced: list[bool] = []
    real = store.checkpoint

    async def checkpoint(*args: Any, **kwargs: Any) -> None:
        synced.append(kwargs.get("synced", True))
        await real(*args, **kwargs)

    store.checkpoint = checkpoint  # type: ignore[method-assign]
    try:
        task_id = await _question(store, root.ts)

        async def script(turn: Turn) -> list[Any]:
            if turn.step == 0:
                return [call("channel_reply", text="on it")]
            if turn.step == 1:
                return [call("tickets_create", title="an MCP server's tool")]
            return ["done"]

        executor = scripted_executor(store, adapter, script, tmp_path / "data")

        async def inbox() -> list[InboxItem]:
            return []

        items = await store.pending_inbox(task_id)
        result = await executor.run_inbox(task_id, items, [], inbox)
        assert result.status == "ok"
        assert synced == [False, True]
    finally:
        await store.close()
    final = ModelResponse(parts=[TextPart("the answer")])
    own = ModelResponse(parts=[ToolCallPart("channel_reply", {"text": "hi"}), ToolCallPart("mcp_search", {})])
    other = ModelResponse(parts=[ToolCallPart("channel_reply", {}), ToolCallPart("tickets_create", {})])
    assert synced_by_next_write([final]) and synced_by_next_write([other, own])
    assert not synced_by_next_write([own, other]) and not synced_by_next_write([])
