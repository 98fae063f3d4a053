"""A task's directory on disk: what it already fetched and for whom, when it was last used.

- **Quota.** What the files under ``files/`` may use is reserved in :mod:`channel.file_quota`;
  the index below records who asked for each file, which its per-person cap counts.
- **Re-fetch.** A fetched file is remembered by its ref and variant (``.fetched.json`` beside ``files/``): a
  second fetch of the same file returns the copy already there, without a download. Concurrent
  writers of the index (parallel fetches) take turns, each through a temporary file of its own.
- **Expiry.** Every session of the task marks it used (``.active``); :func:`expire` removes the
  directories of tasks unused for ``FILES_TTL_DAYS``. The task, its transcript and its handles are
  in storage and stay: a later fetch downloads again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TTL_DAYS",
    "expire",
    "mark_used",
    "owners",
    "remember",
    "remembered",
]

DEFAULT_MAX_BYTES = 524_288_000
DEFAULT_TTL_DAYS = 7.0
_MARKER = ".active"
_INDEX = ".fetched.json"
#: One read-modify-write of an index at a time in this process (the worker threads of parallel fetches).
_INDEX_LOCK = threading.Lock()


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
    """Record a file under ``key`` (``entry`` holds ``path`` relative to ``task_dir``, ``size`` and,
    when known, ``by``: the person who asked for it)."""
    with _INDEX_LOCK:
        index = _index(task_dir)
        index[key] = entry
        target = task_dir / _INDEX
        # A name of its own: two writers never share (or rename away) each other's temporary file.
        tmp = task_dir / f".fetched-{uuid.uuid4().hex}.tmp"
        try:
            tmp.write_text(json.dumps(index), encoding="utf-8")
            tmp.replace(target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def owners(task_dir: Path) -> dict[str, tuple[str, int]]:
    """Who asked for each recorded file: ``{path relative to task_dir: (person, size)}``."""
    found: dict[str, tuple[str, int]] = {}
    for entry in _index(task_dir).values():
        if not isinstance(entry, dict):
            continue
        path, person, size = entry.get("path"), entry.get("by"), entry.get("size")
        if isinstance(path, str) and isinstance(person, str) and person and isinstance(size, int):
            found[path] = (person, size)
    return found


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
