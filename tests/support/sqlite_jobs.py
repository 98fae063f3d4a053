"""Counting the jobs a SQLiteStore runs on its connection: those it hands its database thread
(each one a trip to that thread) and those it runs on the caller's thread (``Store.inline_when``)."""

from __future__ import annotations

import asyncio
from typing import Any

from storage.sqlite import SQLiteStore


def count_jobs(store: SQLiteStore) -> list[Any]:
    """From now on, every job ``store`` submits to its (started) database thread, or runs on the
    caller's thread instead, is appended to the returned list before it runs, as the name of the
    asyncio task that made it (None outside a task) and the job."""
    assert store.database._thread is not None
    jobs: list[Any] = []
    real = store.database._thread.submit
    here = store.database._thread.run_here

    def name() -> str | None:
        task = asyncio.current_task()
        return task.get_name() if task is not None else None

    def counting(fn: Any) -> Any:
        jobs.append((name(), fn))
        return real(fn)

    def counting_here(fn: Any) -> Any:
        ran, result = here(fn)
        if ran:
            jobs.append((name(), fn))
        return ran, result

    store.database._thread.submit = counting  # type: ignore[method-assign]
    store.database._thread.run_here = counting_here  # type: ignore[method-assign]
    return jobs
