"""Counting the jobs a SQLiteStore hands its database thread (each one a trip to that thread)."""

from __future__ import annotations

import asyncio
from typing import Any

from storage.sqlite import SQLiteStore


def count_jobs(store: SQLiteStore) -> list[Any]:
    """From now on, every job ``store`` submits to its (started) database thread is appended to
    the returned list before it runs, as the name of the asyncio task that submitted it (None
    outside a task) and the job."""
    assert store._thread is not None
    jobs: list[Any] = []
    real = store._thread.submit

    def counting(fn: Any) -> Any:
        task = asyncio.current_task()
        jobs.append((task.get_name() if task is not None else None, fn))
        return real(fn)

    store._thread.submit = counting  # type: ignore[method-assign]
    return jobs
