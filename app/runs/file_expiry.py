"""Removing the files of tasks nobody used for ``FILES_TTL_DAYS``, from the scheduler's sweep.

The scheduler sweeps every few seconds; the files are looked at once an hour, on a worker thread
(walking the task directories is file-system work). What counts as use, and what stays (the
task, its transcript and handles), is :mod:`channel.task_files`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from app.settings import Settings
from channel import task_files

log = logging.getLogger(__name__)

__all__ = ["EXPIRY_INTERVAL", "FileExpiry", "sweep_steps"]

#: Seconds between looks at the task directories.
EXPIRY_INTERVAL = 3600.0


class FileExpiry:
    """Removes ``tasks_root/<task>`` directories unused for ``ttl_days``, at most once an interval."""

    def __init__(self, tasks_root: Path, ttl_days: float, *, clock: Callable[[], float] = time.time) -> None:
        self.tasks_root = tasks_root
        self.ttl = ttl_days * 86_400
        self.clock = clock
        self._last: float | None = None

    @classmethod
    def of(cls, settings: Settings) -> FileExpiry:
        """``FILES_TTL_DAYS`` over ``DATA_DIR/tasks``."""
        return cls(settings.data_dir / "tasks", settings.files_ttl_days)

    async def sweep(self) -> int | None:
        """Remove what expired; how many task directories, or None when it was not time yet."""
        now = self.clock()
        if self._last is not None and now - self._last < EXPIRY_INTERVAL:
            return None
        self._last = now
        return await asyncio.to_thread(task_files.expire, self.tasks_root, self.ttl, now=now)


def sweep_steps(*steps: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    """One sweep hook running ``steps`` in turn; a failing step is logged and the others still run."""

    async def sweep() -> None:
        for step in steps:
            try:
                await step()
            except Exception:
                log.exception("a sweep step failed")

    return sweep
