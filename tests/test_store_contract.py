"""The Store contract, run against every backend (see the ``store`` fixture in conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from storage import (
    ClaimOutcome,
    FollowUpRecord,
    LeaseRecord,
    Store,
    StoreError,
    TaskRecord,
    UsageRecord,
    open_store,
)
from storage.postgres import PostgresStore
from storage.sqlite import SQLiteStore
from tests.support.asks import question
from tests.support.sqlite_jobs import count_jobs
from tests.support.waiting import polls

#: The ``store_factory`` fixture: ``await factory(migrate=True)`` opens another store on the same database.
StoreFactory = Callable[..., Awaitable[Store]]

T0 = 1_700_000_000.0


async def claim(
    store: Store,
    *,
    event_id: str = "Ev1",
    channel: str = "C1",
    ts: str = "100.000001",
    thread_ts: str = "100.000001",
    create: bool = True,
    payload: str = '{"text": "hi"}',
    now: float = T0,
) -> ClaimOutcome:
    return await store.claim_message(
        event_id=event_id,
        channel=channel,
        ts=ts,
        thread_ts=thread_ts,
        create=create,
        payload=payload,
        now=now,
    )


async def new_task(store: Store, thread_ts: str = "500.000001") -> str:
    return (await store.create_task(channel="C1", thread_ts=thread_ts, now=T0)).task_id


# -- opening and lifecycle -------------------------------------------------------------


def test_open_store_picks_backend_by_scheme(tmp_path: Path) -> None:
    """sqlite:/// maps to SQLiteStore (relative or absolute path), postgres(ql):// to PostgresStore."""
    relative = open_store("sqlite:///data/threadbound.db")
    assert isinstance(relative, SQLiteStore) and relative.path == "data/threadbound.db"
    absolute = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(absolute, SQLiteStore) and absolute.path == f"{tmp_path}/x.db"
    assert isinstance(open_store("postgresql://u@localhost/db"), PostgresStore)
    assert isinstance(open_store("postgres://u@localhost/db?schema=s1"), PostgresStore)


@pytest.mark.parametrize("url", ["mysql://u:secret@h/db", "threadbound.db", "sqlite://", "sqlite:///"])
def test_open_store_rejects_unknown_urls_without_echoing_them(url: str) -> None:
    """Anything but a SQLite file URL or a Postgres URL is a ValueError that does not repeat the password."""
    with pytest.raises(ValueError) as info:
        open_store(url)
    assert "secret" not in str(info.value)


async def test_sqlite_creates_parent_directory_on_first_use(tmp_path: Path) -> None:
    """Opening does no I/O; migrate() creates the database's parent directory and the file."""
    path = tmp_path / "nested" / "dir" / "t.db"
    store = open_store(f"sqlite:///{path}")
    assert not path.parent.exists()
    try:
        await store.migrate()
        await store.ping()
    finally:
        await store.close()
    assert path.exists()


async def test_sqlite_unopenable_path_raises_store_error(tmp_path: Path) -> None:
    """A database path that cannot be opened (here: a directory) surfaces as StoreError."""
    store = open_store(f"sqlite:///{tmp_path}")
    try:
        with pytest.raises(StoreError):
            await store.ping()
    finally:
        await store.close()


async def test_postgres_unreachable_url_raises_store_error() -> None:
    """ping() on a Postgres URL nothing listens on raises StoreError."""
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/nowhere", connect_timeout=5)
    try:
        with pytest.raises(StoreError):
            await store.ping()
    finally:
        await store.close()


def test_postgres_rejects_unsafe_schema_name() -> None:
    """The schema name is interpolated into DDL, so anything but a plain identifier is refused."""
    with pytest.raises(ValueError):
        PostgresStore("postgresql://u@localhost/db?schema=a;drop")


async def test_migrate_is_idempotent(store: Store) -> None:
    """Migrating an up-to-date database again changes nothing and keeps the data."""
    task_id = await new_task(store)
    await store.migrate()
    await store.migrate()
    assert await store.get_task(task_id) is not None


async def test_concurrent_migrations_are_safe(store_factory: StoreFactory) -> None:
    """Two fresh stores migrating the same empty database at once both succeed."""
    first, second = await store_factory(migrate=False), await store_factory(migrate=False)
    await asyncio.gather(first.migrate(), second.migrate())
    await first.ping()
    assert (await second.create_task(channel="C1", thread_ts="", now=T0)).task_id


async def test_ping_answers_then_raises_after_close(store: Store) -> None:
    """ping() succeeds on a live store and raises StoreError once it is closed."""
    await store.ping()
    await store.close()
    with pytest.raises(StoreError):
        await store.ping()


async def test_data_survives_reopening(store_factory: StoreFactory) -> None:
    """A new store on the same database sees tasks, inbox, handles and effects (restart safety)."""
    first = await store_factory()
    outcome = await claim(first)
    assert outcome.task_id is not None
    await first.mint_handle(task_id=outcome.task_id, kind="msg", ref="C1:1", handle="msg_a")
    await first.open_effect(effect_id="e1", task_id=outcome.task_id, tool="channel_reply", args="{}", now=T0)
    await first.close()
    second = await store_factory()
    assert await second.find_task("C1", "100.000001") == outcome.task_id
    assert [i.item_id for i in await second.pending_inbox(outcome.task_id)] == [outcome.item_id]
    assert await second.resolve_handle(outcome.task_id, "msg_a") is not None
    assert [e.effect_id for e in await second.open_effects(outcome.task_id)] == ["e1"]


# -- claims --------------------------------------------------------------------------


async def test_claim_creates_task_and_inbox_item(store: Store) -> None:
    """A first claim with create=True creates the task, maps its key and appends one inbox item."""
    outcome = await claim(store, payload='{"n": 1}')
    assert outcome.status == "claimed" and outcome.created
    assert outcome.task_id is not None and outcome.item_id is not None
    assert await store.find_task("C1", "100.000001") == outcome.task_id
    task = await store.get_task(outcome.task_id)
    assert task is not None
    assert (task.channel, task.thread_ts, task.transcript, task.enabled_tools) == (
        "C1",
        "100.000001",
        b"",
        (),
    )
    assert task.created_at == T0
    [item] = await store.pending_inbox(outcome.task_id)
    assert (
        item.item_id,
        item.task_id,
        item.channel,
        item.ts,
        item.thread_ts,
        item.payload,
        item.created_at,
    ) == (
        outcome.item_id,
        outcome.task_id,
        "C1",
        "100.000001",
        "100.000001",
        '{"n": 1}',
        T0,
    )


async def test_claim_duplicate_event_id(store: Store) -> None:
    """A retried event_id is a duplicate naming the original task, and adds no inbox item."""
    first = await claim(store)
    again = await claim(store)
    assert again.status == "duplicate" and again.task_id == first.task_id and again.item_id is None
    assert first.task_id is not None
    assert len(await store.pending_inbox(first.task_id)) == 1


async def test_claim_duplicate_message_with_other_event_id_records_that_event(store: Store) -> None:
    """Same (channel, ts) under a new event_id is a duplicate, and that event_id is recorded too."""
    first = await claim(store, event_id="EvMention")
    second = await claim(store, event_id="EvMessage")
    assert second.status == "duplicate" and second.task_id == first.task_id
    # Recorded: the same event id is a duplicate even for a message never claimed.
    retry = await claim(store, event_id="EvMessage", ts="999.000001")
    assert retry.status == "duplicate"
    assert first.task_id is not None
    assert len(await store.pending_inbox(first.task_id)) == 1


async def test_claim_without_task_and_create_false_records_nothing(store: Store) -> None:
    """create=False on an unknown conversation returns no_task and leaves no claim, task or mapping behind."""
    outcome = await claim(store, create=False)
    assert outcome == ClaimOutcome("no_task")
    assert await store.find_task("C1", "100.000001") is None
    stats = await store.stats()
    assert (stats.tasks, stats.pending_inbox) == (0, 0)
    # Neither claim key was recorded, so a later claim of the same event and message succeeds.
    assert (await claim(store, create=True)).status == "claimed"


async def test_claim_into_existing_task_with_create_false(store: Store) -> None:
    """A reply in a known thread is claimed into its task without creating one."""
    root = await claim(store)
    reply = await claim(store, event_id="Ev2", ts="101.000001", create=False)
    assert reply.status == "claimed" and not reply.created and reply.task_id == root.task_id
    assert root.task_id is not None
    assert [i.ts for i in await store.pending_inbox(root.task_id)] == ["100.000001", "101.000001"]


async def test_claim_dm_top_level_is_one_conversation(store: Store) -> None:
    """Top-level DM messages (thread_ts "") all go to the one task of (channel, "")."""
    first = await claim(store, channel="D1", ts="1.1", thread_ts="")
    second = await claim(store, event_id="Ev2", channel="D1", ts="1.2", thread_ts="", create=False)
    assert first.created and second.status == "claimed" and second.task_id == first.task_id
    assert await store.find_task("D1", "") == first.task_id


async def test_concurrent_claims_of_one_message_across_stores(store_factory: StoreFactory) -> None:
    """20 concurrent claims of one message from two stores (different event ids) yield exactly one claimed."""
    stores = [await store_factory(), await store_factory()]
    outcomes = await asyncio.gather(
        *(claim(stores[i % 2], event_id=f"Ev{i}") for i in range(20)),
    )
    statuses = sorted(o.status for o in outcomes)
    assert statuses == ["claimed"] + ["duplicate"] * 19
    [winner] = [o for o in outcomes if o.status == "claimed"]
    assert winner.task_id is not None
    stats = await stores[0].stats()
    assert (stats.tasks, stats.pending_inbox) == (1, 1)


async def test_concurrent_claims_in_one_new_thread_share_one_task(store_factory: StoreFactory) -> None:
    """Different messages racing to start the same conversation end in one task holding all of them."""
    stores = [await store_factory(), await store_factory()]
    outcomes = await asyncio.gather(
        *(
            claim(stores[i % 2], event_id=f"Ev{i}", ts=f"100.{i:06d}", thread_ts="100.000000")
            for i in range(10)
        ),
    )
    assert all(o.status == "claimed" for o in outcomes)
    assert sum(o.created for o in outcomes) == 1
    assert len({o.task_id for o in outcomes}) == 1
    assert (await stores[0].stats()).tasks == 1


@pytest.fixture
def claim_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the claim batches a SQLiteStore commits (stays empty on Postgres, which has none)."""
    import storage.sqlite

    sizes: list[int] = []
    batch = storage.sqlite.run_batch

    def spy(db: Any, calls: Sequence[Any], **how: Any) -> Any:
        sizes.append(len(calls))
        return batch(db, calls, **how)

    monkeypatch.setattr(storage.sqlite, "run_batch", spy)
    return sizes


async def test_concurrent_claims_on_one_store_with_duplicates_in_a_batch(
    store: Store, claim_batches: list[int]
) -> None:
    """Claims made together on one store (SQLite: committed as one batch) each get
    their own outcome: of two deliveries of one message, or two of one event, one is claimed."""
    outcomes = await asyncio.gather(
        claim(store, event_id="EvX", ts="1.1", thread_ts="1.1"),
        claim(store, event_id="EvMention", ts="2.1", thread_ts="2.1"),
        claim(store, event_id="EvMessage", ts="2.1", thread_ts="2.1"),
        claim(store, event_id="EvRetried", ts="3.1", thread_ts="3.1"),
        claim(store, event_id="EvRetried", ts="3.1", thread_ts="3.1"),
        claim(store, event_id="EvReply", ts="2.2", thread_ts="2.1", create=False),
    )
    assert outcomes[0].status == "claimed" and outcomes[0].created
    for pair in (outcomes[1:3], outcomes[3:5]):
        [winner] = [o for o in pair if o.status == "claimed"]
        [loser] = [o for o in pair if o.status == "duplicate"]
        assert winner.created and loser.task_id == winner.task_id and loser.item_id is None
    # A reply queued after its thread's first message: claimed into that task (Postgres may run it first).
    reply = outcomes[5]
    assert reply.status in ("claimed", "no_task")
    if reply.status == "claimed":
        assert reply.task_id == outcomes[1].task_id or reply.task_id == outcomes[2].task_id
    stats = await store.stats()
    assert stats.tasks == 3 and stats.pending_inbox == 3 + (reply.status == "claimed")
    if isinstance(store, SQLiteStore):
        assert claim_batches == [6]  # made in one step of the loop: one transaction


async def test_many_concurrent_claims_on_one_store_get_their_own_outcomes(store: Store) -> None:
    """Hundreds of concurrent claims on one store instance: replies, new threads, unknown threads,
    redeliveries and second deliveries under other event ids, shuffled. Each call gets its own
    correct outcome, and the store ends with exactly the claimed messages."""
    roots = [await claim(store, event_id=f"Root{r}", ts=f"{r}.0", thread_ts=f"{r}.0") for r in range(5)]
    calls: list[dict[str, Any]] = []
    for i in range(100):  # replies into known threads, each delivered up to three times
        reply = {"ts": f"{i % 5}.{i + 1}", "thread_ts": f"{i % 5}.0", "create": False}
        calls.append({"event_id": f"Reply{i}", **reply})
        if i % 2 == 0:
            calls.append({"event_id": f"Reply{i}", **reply})  # redelivery of one event
        if i % 3 == 0:
            calls.append({"event_id": f"Other{i}", **reply})  # the same message under another event
    for i in range(30):  # mentions starting new threads
        calls.append({"event_id": f"New{i}", "ts": f"9{i}.0", "thread_ts": f"9{i}.0", "create": True})
    for i in range(30):  # messages in threads no task knows
        calls.append({"event_id": f"Stray{i}", "ts": f"7{i}.1", "thread_ts": f"7{i}.0", "create": False})
    random.Random(7).shuffle(calls)

    outcomes = await asyncio.gather(*(claim(store, **kwargs) for kwargs in calls))

    by_message: dict[str, list[ClaimOutcome]] = {}
    for kwargs, outcome in zip(calls, outcomes, strict=True):
        by_message.setdefault(kwargs["ts"], []).append(outcome)
    root_tasks = {f"{r}.0": roots[r].task_id for r in range(5)}
    thread_of = {kwargs["ts"]: kwargs["thread_ts"] for kwargs in calls}
    for ts, group in by_message.items():
        if ts.startswith("7"):
            assert group == [ClaimOutcome("no_task")]
            continue
        [winner] = [o for o in group if o.status == "claimed"]
        assert all(o.status == "duplicate" and o.task_id == winner.task_id for o in group if o is not winner)
        if ts.startswith("9"):
            assert winner.created
        else:
            assert not winner.created and winner.task_id == root_tasks[thread_of[ts]]
    claimed = [o for o in outcomes if o.status == "claimed"]
    assert len(claimed) == 130 and len({o.item_id for o in claimed}) == 130
    stats = await store.stats()
    assert (stats.tasks, stats.pending_inbox) == (35, 135)
    for root in roots:
        assert root.task_id is not None
        items = await store.pending_inbox(root.task_id)
        assert len(items) == 21 and [i.item_id for i in items] == sorted(i.item_id for i in items)


async def test_a_failing_claim_among_concurrent_ones_fails_alone(
    store: Store, claim_batches: list[int]
) -> None:
    """A claim the database refuses (here: a NULL payload) raises StoreError; the claims committed
    with it (SQLite: in the same batch, then one by one) are unaffected, and it records nothing."""
    bad_payload: Any = None
    results = await asyncio.gather(
        claim(store, event_id="Ev0", ts="1.0", thread_ts="1.0"),
        claim(store, event_id="Ev1", ts="2.0", thread_ts="2.0"),
        claim(store, event_id="Ev2", ts="3.0", thread_ts="3.0", payload=bad_payload),
        claim(store, event_id="Ev3", ts="4.0", thread_ts="4.0"),
        return_exceptions=True,
    )
    assert isinstance(results[2], StoreError)
    good = [r for i, r in enumerate(results) if i != 2]
    assert all(isinstance(r, ClaimOutcome) and r.status == "claimed" for r in good)
    stats = await store.stats()
    assert (stats.tasks, stats.pending_inbox) == (3, 3)
    # Nothing of the failed claim stayed behind: claiming it properly now succeeds.
    assert (await claim(store, event_id="Ev2", ts="3.0", thread_ts="3.0")).status == "claimed"
    if isinstance(store, SQLiteStore):
        assert claim_batches[:1] == [4]  # one batch, rolled back, then each claim alone


async def test_cancelled_claim_does_not_strand_concurrent_ones(store: Store) -> None:
    """Cancelling one caller while its claim is in flight leaves the claims queued behind it to finish."""
    first = asyncio.create_task(claim(store, event_id="Ev0", ts="100.0", thread_ts="100.0"))
    others = [
        asyncio.create_task(claim(store, event_id=f"Ev{i}", ts=f"{i}.0", thread_ts=f"{i}.0"))
        for i in range(1, 6)
    ]
    await asyncio.sleep(0)  # every claim started: the first is in flight, the others queued behind it
    first.cancel()
    outcomes = await asyncio.wait_for(asyncio.gather(*others), timeout=30)
    assert all(o.status == "claimed" for o in outcomes)
    with contextlib.suppress(asyncio.CancelledError):
        await first
    # The cancelled claim either happened or not at all.
    assert (await claim(store, event_id="Ev0", ts="100.0", thread_ts="100.0")).status in (
        "claimed",
        "duplicate",
    )
    assert (await store.stats()).tasks == 6


# -- retention -----------------------------------------------------------------------

DAY = 86_400.0


async def _keys_present(store: Store, *, event_id: str, ts: str) -> bool:
    """Whether a claim key of ``event_id`` or ``("C1", ts)`` is recorded. A claim into an unknown
    conversation with create=False is a duplicate if a key is taken (recording ``event_id``, dated
    after every cutoff here), else no_task, which records nothing."""
    probe = await claim(
        store, event_id=event_id, ts=ts, thread_ts="no-such-thread", create=False, now=T0 + 100 * DAY
    )
    assert probe.status in ("duplicate", "no_task")
    return probe.status == "duplicate"


async def test_prune_claims_drops_old_keys_and_keeps_recent(store: Store) -> None:
    """Keys claimed before the cutoff go (both tables, counted); keys at or after it stay."""
    old = await claim(store, event_id="EvMention", ts="100.000001", now=T0)
    assert (await claim(store, event_id="EvMessage", ts="100.000001", now=T0 + 1)).status == "duplicate"
    edge = await claim(store, event_id="EvEdge", ts="101.000001", create=False, now=T0 + 7 * DAY)
    recent = await claim(store, event_id="EvRecent", ts="102.000001", create=False, now=T0 + 9 * DAY)
    assert {old.status, edge.status, recent.status} == {"claimed"}

    # Two event keys and one message key are older than the cutoff; EvEdge is exactly at it.
    assert await store.prune_claims(older_than=T0 + 7 * DAY) == 3
    assert not await _keys_present(store, event_id="EvMention", ts="999.1")
    assert not await _keys_present(store, event_id="EvMessage", ts="999.1")
    assert not await _keys_present(store, event_id="EvUnknown", ts="100.000001")
    for event_id, ts in (("EvEdge", "101.000001"), ("EvRecent", "102.000001")):
        assert await _keys_present(store, event_id=event_id, ts="999.1")
        assert await _keys_present(store, event_id=f"EvProbe{ts}", ts=ts)
    assert await store.prune_claims(older_than=T0 + 7 * DAY) == 0


async def test_pruned_message_can_be_claimed_again_and_pending_inbox_is_untouched(store: Store) -> None:
    """Pruning leaves inbox, tasks and conversation keys alone; the documented consequence is that
    a pruned message, delivered again, is claimed again (into its existing task)."""
    first = await claim(store, now=T0)
    assert first.task_id is not None and first.item_id is not None
    assert await store.prune_claims(older_than=T0 + DAY) == 2
    assert [i.item_id for i in await store.pending_inbox(first.task_id)] == [first.item_id]
    assert await store.find_task("C1", "100.000001") == first.task_id
    assert await store.tasks_needing_a_run(now=T0 + DAY) == [first.task_id]

    again = await claim(store, now=T0 + DAY)
    assert again.status == "claimed" and not again.created and again.task_id == first.task_id
    items = await store.pending_inbox(first.task_id)
    assert [i.item_id for i in items] == [first.item_id, again.item_id]
    assert (await store.stats()).tasks == 1


async def test_prune_claims_in_batches_and_concurrently(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog larger than one batch is deleted in full, also by two stores pruning at once."""
    import storage.sqlstore_tasks

    monkeypatch.setattr(storage.sqlstore_tasks, "_PRUNE_BATCH", 2)
    first, second = await store_factory(), await store_factory()
    for i in range(7):
        assert (await claim(first, event_id=f"Ev{i}", ts=f"100.{i}", now=T0 + i)).status == "claimed"
    await claim(first, event_id="EvNew", ts="200.1", now=T0 + DAY)
    assert await first.prune_claims(older_than=T0 + 3) == 6  # three messages, two keys each
    deleted = await asyncio.gather(
        first.prune_claims(older_than=T0 + DAY), second.prune_claims(older_than=T0 + DAY)
    )
    assert sum(deleted) == 8
    for i in range(7):
        assert not await _keys_present(first, event_id=f"Ev{i}", ts=f"100.{i}")
    assert await _keys_present(second, event_id="EvNew", ts="200.1")


# -- tasks ---------------------------------------------------------------------------


async def test_create_task_maps_non_empty_thread_and_reuses_existing(store: Store) -> None:
    """create_task maps a non-empty thread key; an already-mapped key returns its existing task."""
    task = await store.create_task(channel="C1", thread_ts="500.1", now=T0)
    assert await store.find_task("C1", "500.1") == task.task_id
    again = await store.create_task(channel="C1", thread_ts="500.1", now=T0 + 5)
    assert again == task


async def test_create_task_without_thread_maps_nothing(store: Store) -> None:
    """create_task with thread_ts "" creates a distinct unmapped task each time."""
    first = await store.create_task(channel="C1", thread_ts="", now=T0)
    second = await store.create_task(channel="C1", thread_ts="", now=T0)
    assert first.task_id != second.task_id
    assert first.thread_ts == "" and await store.find_task("C1", "") is None


async def test_get_task_unknown_is_none(store: Store) -> None:
    """get_task of an unknown id returns None."""
    assert await store.get_task("nope") is None


async def test_set_task_thread_sets_empty_origin_once(store: Store) -> None:
    """set_task_thread fills an empty origin thread; a set origin is kept; an unknown task is a StoreError."""
    task = await store.create_task(channel="C1", thread_ts="", now=T0)
    await store.set_task_thread(task.task_id, "600.1")
    assert await store.get_task(task.task_id) == TaskRecord(task.task_id, "C1", "600.1", b"", (), T0, "")
    await store.set_task_thread(task.task_id, "700.1")
    got = await store.get_task(task.task_id)
    assert got is not None and got.thread_ts == "600.1"
    with pytest.raises(StoreError):
        await store.set_task_thread("nope", "1.1")


async def test_record_root_then_find_task(store: Store) -> None:
    """record_root maps a posted root to the task; an existing mapping is left as it is."""
    first, second = await new_task(store, "500.1"), await new_task(store, "500.2")
    await store.record_root(channel="C2", ts="800.1", task_id=first)
    assert await store.find_task("C2", "800.1") == first
    await store.record_root(channel="C2", ts="800.1", task_id=second)
    assert await store.find_task("C2", "800.1") == first
    assert await store.find_task("C2", "800.2") is None


async def test_reply_to_recorded_root_resumes_task(store: Store) -> None:
    """A message in a thread under a recorded root is claimed into that task with create=False."""
    task_id = await new_task(store)
    await store.record_root(channel="C1", ts="900.1", task_id=task_id)
    outcome = await claim(store, ts="900.2", thread_ts="900.1", create=False)
    assert outcome.status == "claimed" and outcome.task_id == task_id and not outcome.created


async def test_save_run_consumes_atomically_and_keeps_order(store: Store) -> None:
    """save_run stores the transcript and consumes exactly the given items; the rest stay, oldest first."""
    outcomes = [await claim(store, event_id=f"Ev{i}", ts=f"100.{i:06d}", now=T0 + i) for i in range(1, 5)]
    task_id = outcomes[0].task_id
    assert task_id is not None
    items = await store.pending_inbox(task_id)
    assert [i.item_id for i in items] == [o.item_id for o in outcomes]
    assert [i.created_at for i in items] == [T0 + 1, T0 + 2, T0 + 3, T0 + 4]
    await store.save_run(task_id, transcript=b"[1]", consumed=[items[0].item_id, items[2].item_id])
    assert [i.item_id for i in await store.pending_inbox(task_id)] == [items[1].item_id, items[3].item_id]
    task = await store.get_task(task_id)
    assert task is not None and task.transcript == b"[1]"


async def test_save_run_tools_replaced_only_when_given(store: Store) -> None:
    """enabled_tools given replaces the set; None keeps it; set_enabled_tools replaces it too."""
    task_id = await new_task(store)
    await store.save_run(
        task_id, transcript=b"a", consumed=[], enabled_tools=["channel_edit", "channel_attach"]
    )
    await store.save_run(task_id, transcript=b"b", consumed=[])
    task = await store.get_task(task_id)
    assert task is not None and task.enabled_tools == ("channel_edit", "channel_attach")
    await store.set_enabled_tools(task_id, ["channel_retract"])
    task = await store.get_task(task_id)
    assert task is not None and task.enabled_tools == ("channel_retract",) and task.transcript == b"b"


async def test_save_run_summary_replaced_only_when_given(store: Store) -> None:
    """A summary given with a run replaces the task's; a run saved without one keeps it."""
    task_id = await new_task(store)
    await store.save_run(task_id, transcript=b"a", consumed=[], summary="turn 1: the code is 4711")
    await store.save_run(task_id, transcript=b"b", consumed=[])
    task = await store.get_task(task_id)
    assert task is not None and task.summary == "turn 1: the code is 4711" and task.transcript == b"b"


async def test_usage_recorded_and_summed_by_day_person_and_channel(store: Store) -> None:
    """Usage rows sum per day, person and channel; budgets count input plus output, per person or all."""

    def used(day: str, person: str, channel: str, tokens: int, cached: int = 0) -> UsageRecord:
        return UsageRecord(
            day=day, person=person, channel=channel, input_tokens=tokens, output_tokens=1,
            cache_read_tokens=cached, cache_write_tokens=2, requests=1, task_id="T1", model="m", at=T0,
        )  # fmt: skip

    for record in (
        used("2026-01-01", "U1", "C1", 100),
        used("2026-01-02", "U1", "C1", 10, cached=7),
        used("2026-01-02", "U1", "C1", 20, cached=5),
        used("2026-01-02", "U2", "C2", 1000),
    ):
        await store.record_usage(record)
    assert await store.tokens_spent("2026-01-02") == 10 + 20 + 1000 + 3
    assert await store.tokens_spent("2026-01-02", "U1") == 10 + 20 + 2
    assert await store.tokens_spent("2026-01-03", "U1") == 0
    rows = await store.usage_by_day("2026-01-02")
    assert rows == [
        UsageRecord("2026-01-02", "U1", "C1", 30, 2, 12, 4, 2),
        UsageRecord("2026-01-02", "U2", "C2", 1000, 1, 0, 2, 1),
    ]


async def test_person_tasks_are_the_tasks_one_persons_requests_ran_in(store: Store) -> None:
    """person_tasks lists the tasks a person's model requests ran in since a day, latest first, each
    once with its conversation, bounded by limit; another person's are not theirs."""
    first = await claim(store)
    second = await claim(store, event_id="Ev2", ts="200.000001", thread_ts="200.000001")
    assert first.task_id and second.task_id

    def used(task_id: str, person: str, day: str, at: float) -> UsageRecord:
        return UsageRecord(day=day, person=person, channel="C1", input_tokens=1, output_tokens=1,
                           requests=1, task_id=task_id, model="m", at=at)  # fmt: skip

    for record in (
        used(first.task_id, "U1", "2026-01-01", T0),
        used(first.task_id, "U1", "2026-01-03", T0 + 30),
        used(second.task_id, "U1", "2026-01-02", T0 + 20),
        used(second.task_id, "U2", "2026-01-03", T0 + 40),
    ):
        await store.record_usage(record)
    mine = await store.person_tasks("U1", since="2026-01-02")
    assert [(t.task_id, t.channel, t.thread_ts, t.last_at) for t in mine] == [
        (first.task_id, "C1", "100.000001", T0 + 30),
        (second.task_id, "C1", "200.000001", T0 + 20),
    ]
    assert [t.task_id for t in await store.person_tasks("U1", since="2026-01-02", limit=1)] == [first.task_id]
    assert [t.task_id for t in await store.person_tasks("U2", since="2026-01-01")] == [second.task_id]
    assert await store.person_tasks("U3", since="2026-01-01") == []


async def test_save_run_ignores_other_tasks_items(store: Store) -> None:
    """Item ids of another task are not consumed by this task's save_run."""
    mine = await claim(store)
    theirs = await claim(store, event_id="Ev2", ts="200.1", thread_ts="200.1")
    assert mine.task_id and theirs.task_id and theirs.item_id is not None
    await store.save_run(mine.task_id, transcript=b"x", consumed=[theirs.item_id])
    assert len(await store.pending_inbox(theirs.task_id)) == 1


async def test_save_run_unknown_task_fails_and_consumes_nothing(store: Store) -> None:
    """save_run for an unknown task raises StoreError and changes nothing."""
    outcome = await claim(store)
    assert outcome.task_id and outcome.item_id is not None
    with pytest.raises(StoreError):
        await store.save_run("nope", transcript=b"x", consumed=[outcome.item_id])
    with pytest.raises(StoreError):
        await store.set_enabled_tools("nope", ["x"])
    assert len(await store.pending_inbox(outcome.task_id)) == 1


# -- inbox scheduling ------------------------------------------------------------------


async def test_tasks_needing_a_run_respects_leases_and_effects(store: Store) -> None:
    """Due tasks have pending items or open effects and no live lease; drained tasks are not due."""
    busy = await claim(store, now=T0)
    idle_effect = await new_task(store)
    drained = await claim(store, event_id="Ev2", ts="300.1", thread_ts="300.1", now=T0 + 1)
    assert busy.task_id and drained.task_id and drained.item_id is not None
    await store.save_run(drained.task_id, transcript=b"", consumed=[drained.item_id])
    await store.open_effect(effect_id="e1", task_id=idle_effect, tool="channel_reply", args="{}", now=T0 + 2)
    assert await store.tasks_needing_a_run(now=T0 + 10) == [busy.task_id, idle_effect]

    assert await store.acquire_lease(busy.task_id, owner="a", ttl=30, now=T0 + 10)
    assert await store.tasks_needing_a_run(now=T0 + 20) == [idle_effect]
    # Expired at T0 + 40: due again.
    assert await store.tasks_needing_a_run(now=T0 + 40) == [busy.task_id, idle_effect]

    await store.close_effect("e1", result="{}")
    assert await store.tasks_needing_a_run(now=T0 + 40) == [busy.task_id]


# -- leases --------------------------------------------------------------------------


async def test_lease_lifecycle(store: Store) -> None:
    """Acquire, contest, re-acquire, renew, non-owner renew/release, release and takeover on expiry."""
    task_id = await new_task(store)
    assert await store.get_lease(task_id) is None
    assert await store.acquire_lease(task_id, owner="a", ttl=30, now=T0)
    lease = await store.get_lease(task_id)
    assert lease is not None and (lease.owner, lease.expires_at) == ("a", T0 + 30)

    assert not await store.acquire_lease(task_id, owner="b", ttl=30, now=T0 + 10)
    assert await store.acquire_lease(task_id, owner="a", ttl=30, now=T0 + 10)  # own lease: extended
    assert await store.renew_lease(task_id, owner="a", ttl=30, now=T0 + 20)
    assert (await store.get_lease(task_id)) == LeaseRecord(task_id, "a", T0 + 50)

    assert not await store.renew_lease(task_id, owner="b", ttl=30, now=T0 + 20)
    await store.release_lease(task_id, owner="b")  # not b's: no-op
    assert (await store.get_lease(task_id)) == LeaseRecord(task_id, "a", T0 + 50)

    # Expired: b takes over and a's renewal reports the loss.
    assert await store.acquire_lease(task_id, owner="b", ttl=30, now=T0 + 50)
    assert not await store.renew_lease(task_id, owner="a", ttl=30, now=T0 + 51)
    await store.release_lease(task_id, owner="b")
    assert await store.get_lease(task_id) is None
    assert not await store.renew_lease(task_id, owner="b", ttl=30, now=T0 + 52)
    assert await store.acquire_lease(task_id, owner="c", ttl=30, now=T0 + 52)


async def test_concurrent_lease_acquire_across_stores(store_factory: StoreFactory) -> None:
    """Of many owners racing for one free lease from two stores, exactly one gets it."""
    stores = [await store_factory(), await store_factory()]
    task_id = await new_task(stores[0])
    results = await asyncio.gather(
        *(stores[i % 2].acquire_lease(task_id, owner=f"o{i}", ttl=30, now=T0) for i in range(10))
    )
    assert sum(results) == 1
    lease = await stores[1].get_lease(task_id)
    assert lease is not None and lease.owner == f"o{results.index(True)}"


# -- instances -----------------------------------------------------------------------

# A process that registers as instance "A", takes a lease for ``argv[2]`` and is killed.
_DIES_HOLDING_A_LEASE = f"""
import asyncio, os, signal, sys
from storage import open_store

async def main(url, task_id):
    store = open_store(url)
    await store.register_instance("A", now={T0!r})
    assert await store.acquire_lease(task_id, owner="A", ttl=600, now={T0!r})
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.process
async def test_a_killed_instances_leases_are_taken_over_before_they_expire(
    store_factory: StoreFactory,
) -> None:
    """While a registered owner lives its leases stand; once its process is killed the database
    (or the file lock) says so, dead_owners names it, and expire_leases frees its tasks long
    before the lease would expire. An owner that never registered is judged by expiry alone."""
    store = await store_factory()
    await store.register_instance("B", now=T0)
    task_id, other = await new_task(store, "1.1"), await new_task(store, "2.2")
    assert await store.acquire_lease(other, owner="unregistered", ttl=600, now=T0)
    assert await store.acquire_lease(await new_task(store, "3.3"), owner="B", ttl=600, now=T0)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _DIES_HOLDING_A_LEASE, store_factory.url, task_id
    )
    assert await process.wait() == -signal.SIGKILL
    lease = await store.get_lease(task_id)
    assert lease is not None and lease.owner == "A"
    dead: list[str] = []
    async for _ in polls():  # Postgres ends the session once it sees the connection close
        dead = await store.dead_owners(now=T0 + 1)
        if dead:
            break
    assert dead == ["A"]
    look = await store.look_at_instances("B", now=T0 + 1)
    assert look.missing == ("A",) and "B" in look.live and look.session is not None
    assert not await store.acquire_lease(task_id, owner="B", ttl=60, now=T0 + 1)
    assert await store.expire_leases("A", now=T0 + 1) == 1
    assert await store.acquire_lease(task_id, owner="B", ttl=60, now=T0 + 1)
    assert await store.dead_owners(now=T0 + 1) == []
    lease = await store.get_lease(other)
    assert lease is not None and lease.owner == "unregistered"


async def test_live_instances_are_never_dead(store_factory: StoreFactory) -> None:
    """Two stores on one database (two processes on one DATA_DIR, or two instances on Postgres)
    see each other's registered owners as alive, so neither takes the other's conversations."""
    first, second = await store_factory(), await store_factory()
    await first.register_instance("A", now=T0)
    await second.register_instance("B", now=T0)
    assert await first.acquire_lease(await new_task(first, "1.1"), owner="A", ttl=600, now=T0)
    assert await second.acquire_lease(await new_task(second, "2.2"), owner="B", ttl=600, now=T0)
    assert await first.dead_owners(now=T0 + 1) == []
    assert await second.dead_owners(now=T0 + 1) == []


async def test_a_look_shows_our_own_lock_held_and_every_live_instance(store_factory: StoreFactory) -> None:
    """look_at_instances, from the store an owner registered through: its own lock held (the
    session), every registered owner alive, none missing; an owner registered elsewhere has no
    session here. On Postgres, once our own session is ended, the look says so (no session)."""
    first, second = await store_factory(), await store_factory()
    await first.register_instance("A", now=T0)
    await second.register_instance("B", now=T0)
    assert await second.acquire_lease(await new_task(second, "2.2"), owner="B", ttl=600, now=T0)
    look = await first.look_at_instances("A", now=T0 + 1)
    assert look.session is not None and look.live == {"A", "B"} and look.missing == ()
    assert (await first.look_at_instances("B", now=T0 + 1)).session is None
    if isinstance(first, PostgresStore):
        import asyncpg

        conn = await asyncpg.connect(store_factory.url.split("?")[0])
        try:
            ended = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'"
                " AND objsubid = 2 AND classid::bigint = $1 AND objid::bigint = $2",
                0x7469,
                look.session,
            )
        finally:
            await conn.close()
        assert ended == 1
        async for _ in polls():  # the backend ends once it handles the signal
            look = await first.look_at_instances("A", now=T0 + 2)
            if look.session is None:
                break
        assert look.session is None and "A" not in look.live and "B" in look.live
        assert await first.register_instance("A", now=T0 + 3)  # taken anew, under a new key
        again = await first.look_at_instances("A", now=T0 + 3)
        assert again.session is not None and again.live == {"A", "B"}


async def test_registering_again_is_harmless(store_factory: StoreFactory) -> None:
    """register_instance is repeated every few seconds (to retake a liveness a database restart
    ended): on a live registration it changes nothing and the owner stays alive."""
    store, other = await store_factory(), await store_factory()
    await store.register_instance("A", now=T0)
    assert await store.acquire_lease(await new_task(store), owner="A", ttl=600, now=T0)
    await store.register_instance("A", now=T0 + 5)
    assert await other.dead_owners(now=T0 + 6) == []


# -- handles -------------------------------------------------------------------------


async def test_mint_handle_is_idempotent_per_ref(store: Store) -> None:
    """A known (task, kind, ref) keeps its first handle; authored only rises; data is replaced unless "{}"."""
    task_id = await new_task(store)
    first = await store.mint_handle(task_id=task_id, kind="msg", ref="C1:1.1", handle="msg_first")
    assert (first.handle, first.authored, first.data) == ("msg_first", False, "{}")

    again = await store.mint_handle(
        task_id=task_id, kind="msg", ref="C1:1.1", handle="msg_second", authored=True, data='{"a": 1}'
    )
    assert (again.handle, again.authored, again.data) == ("msg_first", True, '{"a": 1}')
    kept = await store.mint_handle(task_id=task_id, kind="msg", ref="C1:1.1", handle="msg_third")
    assert (kept.handle, kept.authored, kept.data) == ("msg_first", True, '{"a": 1}')

    assert await store.resolve_handle(task_id, "msg_first") == kept
    assert await store.resolve_handle(task_id, "msg_second") is None
    # Same ref under another kind is another object.
    as_file = await store.mint_handle(task_id=task_id, kind="file", ref="C1:1.1", handle="file_x")
    assert as_file.handle == "file_x" and as_file.kind == "file"


async def test_handles_are_task_scoped(store: Store) -> None:
    """resolve_handle refuses another task's handle; the same ref gets a separate handle per task."""
    mine, theirs = await new_task(store, "1.1"), await new_task(store, "2.2")
    record = await store.mint_handle(
        task_id=mine, kind="file", ref="F1", handle="file_mine", data='{"n": "x"}'
    )
    assert record.task_id == mine
    assert await store.resolve_handle(theirs, "file_mine") is None
    assert await store.resolve_handle(mine, "file_unknown") is None
    other = await store.mint_handle(task_id=theirs, kind="file", ref="F1", handle="file_theirs")
    assert other.handle == "file_theirs" and other.data == "{}"


async def test_mint_handle_for_unknown_task_fails(store: Store) -> None:
    """A handle cannot be minted for a task that does not exist."""
    with pytest.raises(StoreError):
        await store.mint_handle(task_id="nope", kind="msg", ref="C1:1", handle="msg_x")


# -- effects -------------------------------------------------------------------------


async def test_effect_journal(store: Store) -> None:
    """open_effect journals an attempt, open_effects lists them oldest first, close_effect records results."""
    task_id = await new_task(store)
    other = await new_task(store, "9.9")
    await store.open_effect(effect_id="e1", task_id=task_id, tool="channel_reply", args='{"t": 1}', now=T0)
    await store.open_effect(
        effect_id="e2", task_id=task_id, tool="channel_react", args='{"t": 2}', now=T0 + 1
    )
    await store.open_effect(effect_id="e3", task_id=other, tool="channel_reply", args="{}", now=T0)
    opened = await store.open_effects(task_id)
    assert [(e.effect_id, e.tool, e.args, e.state, e.result, e.created_at) for e in opened] == [
        ("e1", "channel_reply", '{"t": 1}', "open", None, T0),
        ("e2", "channel_react", '{"t": 2}', "open", None, T0 + 1),
    ]
    await store.close_effect("e1", result='{"ok": true}')
    assert [e.effect_id for e in await store.open_effects(task_id)] == ["e2"]
    closed = await store.get_effect("e1")
    assert closed is not None and (closed.state, closed.result, closed.task_id) == (
        "done",
        '{"ok": true}',
        task_id,
    )
    assert await store.get_effect("nope") is None


async def test_run_state_reads_what_a_run_starts_from_together(store: Store) -> None:
    """run_state is pending_inbox, open_effects, get_task, has_open_approval, open_asks and
    pending_feedback read together (the scheduler's look at a task before each run; SQLite makes
    it one job on its database thread)."""
    first = await claim(store)
    assert first.task_id is not None
    task_id = first.task_id
    await claim(store, event_id="Ev2", ts="100.000002", create=False)
    await store.open_effect(effect_id="e1", task_id=task_id, tool="channel_reply", args="{}", now=T0)
    state = await store.run_state(task_id)
    assert state.items == await store.pending_inbox(task_id) and len(state.items) == 2
    assert state.effects == await store.open_effects(task_id)
    assert [e.effect_id for e in state.effects] == ["e1"]
    assert state.task == await store.get_task(task_id)
    assert (state.open_approval, state.asks, state.feedback) == (False, (), ())
    await open_approval(store, task_id)
    await store.open_ask(
        question(task_id, "q_1", created_at=T0, options=("staging", "prod"), thread_ts="100.000001")
    )
    await store.record_feedback(
        task_id=task_id, message="100.000009", user_id="U2", user_name="Bob", kind="negative", now=T0
    )
    state = await store.run_state(task_id)
    assert state.open_approval is True
    assert list(state.asks) == await store.open_asks(task_id) and state.asks[0].options == ("staging", "prod")
    assert list(state.feedback) == await store.pending_feedback(task_id) and len(state.feedback) == 1
    empty = await store.run_state("no-such-task")
    assert (empty.items, empty.effects, empty.task, empty.open_approval) == ([], [], None, False)
    if isinstance(store, SQLiteStore):
        jobs = count_jobs(store)
        await store.run_state(task_id)
        assert len(jobs) == 1


async def test_take_lease_with_state_is_the_lease_and_the_run_state_together(store: Store) -> None:
    """take_lease_with_state takes the lease as take_lease does and, when taken, reads the task's
    run_state as of that moment (one job on SQLite's database thread); not taken, neither."""
    first = await claim(store)
    assert first.task_id is not None
    task_id = first.task_id
    await store.open_effect(effect_id="e1", task_id=task_id, tool="channel_reply", args="{}", now=T0)
    if isinstance(store, SQLiteStore):
        jobs = count_jobs(store)
    fence, state = await store.take_lease_with_state(task_id, owner="A", ttl=10, now=T0)
    if isinstance(store, SQLiteStore):
        assert len(jobs) == 1
    assert fence is not None and state is not None
    assert state == await store.run_state(task_id)
    assert len(state.items) == 1 and [e.effect_id for e in state.effects] == ["e1"]
    assert (await store.get_lease(task_id)).owner == "A"  # type: ignore[union-attr]
    assert await store.take_lease_with_state(task_id, owner="B", ttl=10, now=T0 + 5) == (None, None)
    again, _ = await store.take_lease_with_state(task_id, owner="A", ttl=10, now=T0 + 5)
    assert again == fence  # its own live lease: the same fence, as take_lease keeps it
    later, _ = await store.take_lease_with_state(task_id, owner="B", ttl=10, now=T0 + 20)
    assert later is not None and later.token != fence.token


async def test_effect_errors(store: Store) -> None:
    """Re-opening an effect id or closing an unknown one is a StoreError."""
    task_id = await new_task(store)
    await store.open_effect(effect_id="e1", task_id=task_id, tool="t", args="{}", now=T0)
    with pytest.raises(StoreError):
        await store.open_effect(effect_id="e1", task_id=task_id, tool="t", args="{}", now=T0)
    with pytest.raises(StoreError):
        await store.close_effect("nope", result="{}")


# -- stats ---------------------------------------------------------------------------


async def test_stats_counts(store: Store) -> None:
    """stats() counts tasks and pending inbox items, with further counts in extra."""
    outcome = await claim(store)
    await claim(store, event_id="Ev2", ts="100.2", create=False)
    assert outcome.task_id is not None
    await store.open_effect(effect_id="e1", task_id=outcome.task_id, tool="t", args="{}", now=T0)
    stats = await store.stats()
    assert (stats.tasks, stats.pending_inbox) == (1, 2)
    assert stats.extra["open_effects"] == 1 and stats.extra["leases"] == 0


# -- approvals -------------------------------------------------------------------------------


async def open_approval(store: Store, task_id: str, approval_id: str = "apv_1", now: float = T0) -> None:
    await store.open_approval(
        approval_id=approval_id,
        task_id=task_id,
        tool_call_id=f"call_{approval_id}",
        tool="channel_retract",
        args='{"message": "msg_1"}',
        requester="U1",
        channel="C1",
        thread_ts="500.000001",
        card_effect=f"eff_{approval_id}",
        now=now,
    )


async def test_an_approval_opens_with_its_card_effect_and_holds_its_task(store: Store) -> None:
    """Opening an approval journals its card as an open effect; while it is undecided the task's
    inbox waits (not due), but the open card effect still makes the task due."""
    task_id = await new_task(store)
    await open_approval(store, task_id)
    record = await store.get_approval("apv_1")
    assert (
        record is not None and record.decision is None and record.card_ts == "" and record.requester == "U1"
    )
    [effect] = await store.open_effects(task_id)
    assert (effect.effect_id, effect.tool) == ("eff_apv_1", "approval_card")
    assert await store.tasks_needing_a_run(now=T0 + 1) == [task_id]
    await store.close_effect("eff_apv_1", result="{}")
    await store.set_approval_card("apv_1", "600.000001")
    assert (await store.get_approval("apv_1")).card_ts == "600.000001"  # type: ignore[union-attr]
    outcome = await claim(store, event_id="Ev9", ts="500.000009", thread_ts="500.000001", create=False)
    assert outcome.task_id == task_id
    assert await store.tasks_needing_a_run(now=T0 + 1) == []  # waiting for the decision
    assert await store.has_open_approval(task_id) and not await store.has_open_approval("other")


async def test_the_first_decision_wins_once_and_resumes_the_task(store: Store) -> None:
    """Of two decisions only the first counts; it appends one inbox item, which makes the task due."""
    task_id = await new_task(store)
    await open_approval(store, task_id)
    await store.close_effect("eff_apv_1", result="{}")
    await store.set_approval_card("apv_1", "600.000001")
    won = await store.decide_approval(
        "apv_1", decision="approved", user_id="U1", payload='{"k": 1}', now=T0 + 5
    )
    lost = await store.decide_approval(
        "apv_1", decision="denied", user_id="U2", payload='{"k": 2}', now=T0 + 6
    )
    assert (won, lost) == (True, False)
    assert not await store.decide_approval("apv_x", decision="denied", user_id="U2", payload="{}", now=T0)
    record = await store.get_approval("apv_1")
    assert record is not None and (record.decision, record.decided_by, record.decided_at) == (
        "approved",
        "U1",
        T0 + 5,
    )
    [item] = await store.pending_inbox(task_id)
    assert (item.payload, item.ts, item.thread_ts) == ('{"k": 1}', "600.000001", "500.000001")
    assert await store.tasks_needing_a_run(now=T0 + 10) == [task_id]
    assert not await store.has_open_approval(task_id)


async def test_concurrent_decisions_yield_one_winner(store_factory: StoreFactory) -> None:
    """Deciders racing on two connections (two instances): exactly one wins and one item is appended."""
    first, second = await store_factory(), await store_factory()
    task_id = await new_task(first)
    await open_approval(first, task_id)
    results = await asyncio.gather(
        *(
            s.decide_approval("apv_1", decision=d, user_id="U1", payload=d, now=T0)
            for s, d in [(first, "approved"), (second, "denied")] * 4
        )
    )
    assert sorted(results) == [False] * 7 + [True]
    assert len(await first.pending_inbox(task_id)) == 1


async def test_expired_approvals_and_execution_once(store: Store) -> None:
    """Open approvals older than the cutoff are listed; an approved call starts at most once."""
    task_id = await new_task(store)
    await open_approval(store, task_id, "apv_old", now=T0)
    await open_approval(store, task_id, "apv_new", now=T0 + 100)
    assert [a.approval_id for a in await store.expired_approvals(before=T0 + 50)] == ["apv_old"]
    assert [a.approval_id for a in await store.task_approvals(task_id)] == ["apv_old", "apv_new"]
    assert not await store.start_execution("apv_new", now=T0)  # not approved
    await store.decide_approval("apv_new", decision="approved", user_id="U1", payload="{}", now=T0 + 101)
    assert await store.start_execution("apv_new", now=T0 + 102)
    assert not await store.start_execution("apv_new", now=T0 + 103)
    assert (await store.get_approval("apv_new")).executed_at == T0 + 102  # type: ignore[union-attr]
    assert [a.approval_id for a in await store.expired_approvals(before=T0 + 500)] == ["apv_old"]


async def test_feedback_is_one_per_person_and_message_and_shown_once(store: Store) -> None:
    """A second click by the same person on the same answer replaces the first; shown feedback is not
    pending again, and a later click is."""
    task = await store.create_task(channel="C1", thread_ts="1.000100", now=1.0)
    common = {"task_id": task.task_id, "message": "C1:1.000200", "user_id": "U1", "user_name": "Alice"}
    await store.record_feedback(**common, kind="positive", now=10.0)
    await store.record_feedback(**common, kind="negative", now=11.0)
    await store.record_feedback(**{**common, "user_id": "U2", "user_name": "Bob"}, kind="positive", now=12.0)
    pending = await store.pending_feedback(task.task_id)
    assert [(f.user_name, f.kind, f.clicked_at) for f in pending] == [
        ("Alice", "negative", 11.0),
        ("Bob", "positive", 12.0),
    ]
    await store.mark_feedback_shown(task.task_id, upto=12.0)
    assert await store.pending_feedback(task.task_id) == []
    await store.record_feedback(**common, kind="positive", now=13.0)
    assert [f.kind for f in await store.pending_feedback(task.task_id)] == ["positive"]
    with pytest.raises(StoreError):
        await store.record_feedback(**common, kind="meh", now=14.0)


# -- follow-ups (issue 23) ---------------------------------------------------------------


def follow_up(task_id: str, handle: str = "fu_aaaaaaaa1", due_at: float = T0 + 600) -> FollowUpRecord:
    return FollowUpRecord(handle, task_id, "U1", "C1", "500.000001", "check the deploy", due_at, T0)


async def schedule(store: Store, record: FollowUpRecord, per_task: int = 10, install_max: int = 1000) -> str:
    payload = json.dumps({"kind": "follow_up", "follow_up": record.follow_up, "user": record.requester})
    return await store.schedule_follow_up(record, payload=payload, per_task=per_task, install_max=install_max)


async def test_a_follow_up_fires_once_when_due_into_its_tasks_inbox(store: Store) -> None:
    """A pending follow-up is listed, not fired early, then appended to its task's inbox once, by one call."""
    task_id = await new_task(store)
    assert await schedule(store, follow_up(task_id)) == "scheduled"
    assert [f.follow_up for f in await store.task_follow_ups(task_id)] == ["fu_aaaaaaaa1"]
    assert await store.next_follow_up_due() == T0 + 600
    assert await store.fire_follow_ups(now=T0 + 599) == []
    [fired] = await store.fire_follow_ups(now=T0 + 700)
    assert (fired.follow_up, fired.state, fired.fired_at) == ("fu_aaaaaaaa1", "fired", T0 + 700)
    assert await store.fire_follow_ups(now=T0 + 800) == []
    [item] = await store.pending_inbox(task_id)
    assert (item.ts, item.thread_ts, item.created_at) == ("fu_aaaaaaaa1", "500.000001", T0 + 700)
    assert json.loads(item.payload)["user"] == "U1"
    assert await store.task_follow_ups(task_id) == [] and await store.next_follow_up_due() is None
    assert await store.follow_up_counts() == {"pending": 0, "fired": 1, "cancelled": 0}


async def test_a_follow_up_waits_while_its_tasks_lease_is_held(store: Store) -> None:
    """A due follow-up of a task under a live lease stays pending until the lease is free."""
    task_id = await new_task(store)
    await schedule(store, follow_up(task_id))
    assert await store.acquire_lease(task_id, owner="o1", ttl=60, now=T0 + 600)
    assert await store.fire_follow_ups(now=T0 + 610) == []
    await store.release_lease(task_id, owner="o1")
    assert [f.follow_up for f in await store.fire_follow_ups(now=T0 + 620)] == ["fu_aaaaaaaa1"]


async def test_follow_ups_are_bounded_per_task_and_per_install(store: Store) -> None:
    """Past the per-task or per-install count of pending follow-ups, scheduling stores nothing."""
    first, second = await new_task(store), await new_task(store, "600.000001")
    assert await schedule(store, follow_up(first, "fu_aaaaaaaa1"), per_task=1) == "scheduled"
    assert await schedule(store, follow_up(first, "fu_aaaaaaaa2"), per_task=1) == "task_full"
    assert await schedule(store, follow_up(second, "fu_aaaaaaaa3"), install_max=1) == "install_full"
    assert await store.follow_up_counts() == {"pending": 1, "fired": 0, "cancelled": 0}


async def test_a_follow_up_is_cancelled_once_and_only_by_its_task(store: Store) -> None:
    """Cancel takes the task's own pending follow-up once; another task's handle changes nothing."""
    first, second = await new_task(store), await new_task(store, "600.000001")
    await schedule(store, follow_up(first))
    assert not await store.cancel_follow_up(second, "fu_aaaaaaaa1", now=T0)
    assert await store.get_follow_up(second, "fu_aaaaaaaa1") is None
    assert await store.cancel_follow_up(first, "fu_aaaaaaaa1", now=T0)
    assert not await store.cancel_follow_up(first, "fu_aaaaaaaa1", now=T0)
    found = await store.get_follow_up(first, "fu_aaaaaaaa1")
    assert found is not None and found.state == "cancelled"
    assert await store.fire_follow_ups(now=T0 + 10_000) == []
    assert await store.pending_inbox(first) == []


async def test_a_refused_follow_up_fires_as_its_refusal(store: Store) -> None:
    """A follow-up marked refused is appended with the refusal payload instead of its own."""
    task_id = await new_task(store)
    await schedule(store, follow_up(task_id))
    await store.refuse_follow_up("fu_aaaaaaaa1", payload='{"kind": "follow_up", "refused": "x"}')
    await store.fire_follow_ups(now=T0 + 700)
    [item] = await store.pending_inbox(task_id)
    assert json.loads(item.payload)["refused"] == "x"


async def test_concurrent_firers_fire_each_follow_up_once(store_factory: StoreFactory) -> None:
    """Firers racing on two connections (two instances) append each due follow-up exactly once."""
    first, second = await store_factory(), await store_factory()
    tasks = [await new_task(first, f"{500 + i}.000001") for i in range(20)]
    for i, task_id in enumerate(tasks):
        await schedule(first, follow_up(task_id, f"fu_aaaaaaa{i:02d}"))
    results = await asyncio.gather(*(s.fire_follow_ups(now=T0 + 700, limit=3) for s in [first, second] * 10))
    fired = [f.follow_up for batch in results for f in batch]
    assert sorted(fired) == sorted(set(fired)) and len(fired) == 20
    for task_id in tasks:
        assert len(await first.pending_inbox(task_id)) == 1


async def test_pruning_follow_ups_keeps_pending_and_recent_ones(store: Store) -> None:
    """Prune drops fired and cancelled follow-ups done before the cutoff; pending ones always stay."""
    task_id = await new_task(store)
    for n, due in enumerate([T0 + 100, T0 + 200, T0 + 10_000]):
        await schedule(store, follow_up(task_id, f"fu_aaaaaaaa{n}", due_at=due))
    await store.fire_follow_ups(now=T0 + 150)  # the first fires at T0 + 150
    await store.cancel_follow_up(task_id, "fu_aaaaaaaa1", now=T0 + 300)
    assert await store.prune_follow_ups(older_than=T0 + 200) == 1
    assert await store.get_follow_up(task_id, "fu_aaaaaaaa0") is None
    assert await store.prune_follow_ups(older_than=T0 + 1_000_000) == 1
    assert [f.follow_up for f in await store.pending_follow_ups()] == ["fu_aaaaaaaa2"]
