"""SQLite group commit: single write statements made at once share one transaction (one WAL sync),
and writes that the next synced commit covers go without a sync of their own."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import storage.sqlite
from storage import open_store
from storage.base import UsageRecord
from storage.sqlite import SQLiteStore
from tests.support.sqlite_jobs import count_jobs

T0 = 1_700_000_000.0


async def test_concurrent_single_statement_writes_share_one_commit(tmp_path: Path) -> None:
    """Twenty lease releases made at once reach the database thread as far fewer jobs than twenty,
    and each is answered once committed; reads still go one job each."""
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    assert isinstance(store, SQLiteStore)
    await store.migrate()
    try:
        jobs = count_jobs(store)
        await asyncio.gather(*(store.release_lease(f"task-{n}", owner="me") for n in range(20)))
        assert 1 <= len(jobs) <= 3
        jobs.clear()
        assert [await store.get_lease(f"task-{n}") for n in range(3)] == [None, None, None]
        assert len(jobs) == 3
    finally:
        await store.close()


async def test_writes_synced_by_the_next_commit_are_committed_without_a_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases, handles, usage rows, journal closes and a checkpoint marked ``synced=False`` commit
    under ``synchronous = NORMAL`` (no WAL sync; the next synced commit syncs them too); claims,
    journal entries opened, checkpoints and saves under ``FULL``, and so does a batch mixing both.
    Each is committed all the same: a new connection (another process) reads it back."""
    levels: list[int] = []
    real = storage.sqlite.run_batch

    def spy(db: Any, calls: Sequence[Any], **how: Any) -> Any:
        levels.append(int(db.execute("PRAGMA synchronous").fetchone()[0]))
        return real(db, calls, **how)

    monkeypatch.setattr(storage.sqlite, "run_batch", spy)
    normal, full = 1, 2
    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SQLiteStore)
    await store.migrate()
    try:
        claimed = await store.claim_message(
            event_id="Ev1", channel="C1", ts="1.1", thread_ts="1.1", create=True, payload="{}", now=T0
        )
        task_id, item = claimed.task_id, claimed.item_id
        assert task_id is not None and item is not None
        assert levels == [full]
        fence = await store.take_lease(task_id, owner="me", ttl=60, now=T0)
        assert await store.renew_lease(task_id, owner="me", ttl=60, now=T0 + 1, fence=fence)
        await store.mint_handle(task_id=task_id, kind="msg", ref="C1:1.1", handle="msg_abcdefghijkl")
        await store.record_usage(
            UsageRecord(day="2026-12-01", person="U1", channel="C1", task_id=task_id, model="m", at=T0)
        )
        assert levels[1:] == [normal] * 4
        # Any other job on the thread (a script, a read) finds FULL again: nothing inherits NORMAL.
        assert (
            await store.database._run(lambda db: int(db.execute("PRAGMA synchronous").fetchone()[0])) == full
        )
        await store.open_effect(
            effect_id="e1", task_id=task_id, tool="channel_reply", args="{}", now=T0, fence=fence
        )
        await store.close_effect("e1", result='{"ok": true}', fence=fence)
        assert levels[5:] == [full, normal]
        await store.checkpoint(task_id, transcript=b"[]", consumed=[], fence=fence, synced=False)
        await store.checkpoint(task_id, transcript=b"[]", consumed=[item], fence=fence)
        assert levels[7:] == [normal, full]
        # One batch of a write that needs no sync and one that does: synced.
        await asyncio.gather(
            store.release_lease(task_id, owner="me"),
            store.save_run(task_id, transcript=b"[]", consumed=[], fence=None),
        )
        assert levels[9:] in ([full], [normal, full], [full, normal])
        # A synced batch after one that went without a sync commits under FULL.
        levels.clear()
        await store.claim_message(
            event_id="Ev2", channel="C1", ts="1.2", thread_ts="1.1", create=False, payload="{}", now=T0
        )
        assert levels == [full]
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT state FROM effects WHERE effect_id = 'e1'").fetchone() == ("done",)
        assert db.execute("SELECT COUNT(*) FROM model_usage").fetchone() == (1,)
        assert db.execute("SELECT COUNT(*) FROM handles").fetchone() == (1,)
        assert db.execute("SELECT COUNT(*) FROM leases").fetchone() == (0,)


async def test_writes_made_in_one_step_of_the_loop_share_one_trip(tmp_path: Path) -> None:
    """A run's usage row and checkpoint, made side by side (gathered), reach the database thread
    as one job: the first writer lets the loop finish its step before it commits."""
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    assert isinstance(store, SQLiteStore)
    await store.migrate()
    try:
        task = await store.create_task(channel="C1", thread_ts="1.1", now=T0)
        usage = UsageRecord(
            day="2026-12-01", person="U1", channel="C1", task_id=task.task_id, model="m", at=T0
        )
        jobs = count_jobs(store)
        await asyncio.gather(
            store.record_usage(usage),
            store.checkpoint(task.task_id, transcript=b"[]", consumed=[], fence=None, synced=False),
        )
        assert len(jobs) == 1
        saved = await store.get_task(task.task_id)
        assert saved is not None and saved.run_open
        assert [u.person for u in await store.usage_by_day("2026-12-01")] == ["U1"]
    finally:
        await store.close()
