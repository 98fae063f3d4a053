"""SQLite group commit: single write statements made at once share one transaction (one WAL sync)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from storage import open_store
from storage.sqlite import SQLiteStore


async def test_concurrent_single_statement_writes_share_one_commit(tmp_path: Path) -> None:
    """Twenty lease releases made at once reach the database thread as far fewer jobs than twenty,
    and each is answered once committed; reads still go one job each."""
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    assert isinstance(store, SQLiteStore)
    await store.migrate()
    try:
        assert store._thread is not None
        jobs: list[Any] = []
        real = store._thread.submit

        def counting(fn: Any) -> Any:
            jobs.append(fn)
            return real(fn)

        store._thread.submit = counting  # type: ignore[method-assign]
        await asyncio.gather(*(store.release_lease(f"task-{n}", owner="me") for n in range(20)))
        assert 1 <= len(jobs) <= 3
        jobs.clear()
        assert [await store.get_lease(f"task-{n}") for n in range(3)] == [None, None, None]
        assert len(jobs) == 3
    finally:
        await store.close()
