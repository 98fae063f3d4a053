"""A task's directory on disk: how much it holds, what it already fetched, when it was last used.

- **Quota.** The files a task fetched or a tool produced (``files/`` in its directory) may use
  at most ``TASK_FILES_MAX_BYTES`` together: :func:`check_room` refuses (``file_refused``) a
  file that would pass it, before any byte is written.
- **Re-fetch.** A fetched file is remembered by its ref and variant (``.fetched.json`` beside ``files/``): a
  second fetch of the same file returns the copy already there, without a download.
- **Expiry.** Every session of the task marks it used (``.active``); :func:`expire` removes the
  directories of tasks unused for ``FILES_TTL_DAYS``. The task, its transcript and its handles are
  in storage and stay: a later fetch downloads again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from .errors import ChannelError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TTL_DAYS",
    "check_room",
    "expire",
    "mark_used",
    "remember",
    "remembered",
    "usage",
]

DEFAULT_MAX_BYTES = 524_288_000
DEFAULT_TTL_DAYS = 7.0
_MARKER = ".active"
_INDEX = ".fetched.json"


def usage(task_dir: Path) -> int:
    """Bytes of every file under ``task_dir/files`` (partial downloads included)."""
    total = 0
    for root, _, names in os.walk(task_dir / "files"):
        for name in names:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total


async def check_room(task_dir: Path, size: int, max_bytes: int, what: str = "the file") -> None:
    """Raise ``file_refused`` when ``size`` more bytes would put the task past ``max_bytes``."""
    used = await asyncio.to_thread(usage, task_dir)
    if used + size > max_bytes:
        raise ChannelError(
            "file_refused",
            f"{what} ({_mib(size)}) would pass this task's file quota: {_mib(used)} of {_mib(max_bytes)} "
            "is in use. Work with the files already fetched, or ask an operator to raise "
            "TASK_FILES_MAX_BYTES.",
        )


def mark_used(task_dir: Path) -> None:
    """Note that the task was used now (its directory, if it has one, is kept for another TTL)."""
    if task_dir.is_dir():
        (task_dir / _MARKER).touch()


def remembered(task_dir: Path, key: str) -> dict[str, Any] | None:
    """The earlier fetch under ``key`` whose file is still there, unchanged in size; else None."""
    entry = _index(task_dir).get(key)
    if not isinstance(entry, dict):
        return None
    path = task_dir / str(entry.get("path") or "")
    try:
        if path.resolve().is_relative_to(task_dir.resolve()) and path.stat().st_size == entry.get("size"):
            return entry
    except OSError:
        return None
    return None


def remember(task_dir: Path, key: str, entry: dict[str, Any]) -> None:
    """Record a fetch under ``key`` (``entry`` holds ``path`` relative to ``task_dir`` and ``size``)."""
    index = _index(task_dir)
    index[key] = entry
    target = task_dir / _INDEX
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(index), encoding="utf-8")
    tmp.replace(target)


def _index(task_dir: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((task_dir / _INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def expire(tasks_root: Path, ttl_seconds: float, *, now: float | None = None) -> int:
    """Remove the directories of tasks under ``tasks_root`` unused for ``ttl_seconds``; how many."""
    cutoff = (time.time() if now is None else now) - ttl_seconds
    removed = 0
    try:
        entries = list(tasks_root.iterdir())
    except OSError:
        return 0
    for task_dir in entries:
        if not task_dir.is_dir() or _last_used(task_dir) >= cutoff:
            continue
        shutil.rmtree(task_dir, ignore_errors=True)
        removed += 1
    if removed:
        log.info("removed the files of %d tasks unused for %.1f days", removed, ttl_seconds / 86_400)
    return removed


def _last_used(task_dir: Path) -> float:
    """The newest of the marker's and the directory's own modification times."""
    times = [task_dir.stat().st_mtime]
    with contextlib.suppress(OSError):
        times.append((task_dir / _MARKER).stat().st_mtime)
    return max(times)


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
