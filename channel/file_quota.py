"""Disk for files, reserved before a byte is written: per task, per person, for the install.

A fetch or a file an MCP tool returns first *reserves* its size (a download's declared size,
which it never writes past) with :meth:`FileQuota.reserve`; the reservation holds while the
bytes are written and is released once they landed (the file then counts as itself) or failed.
What is in use is measured from disk — the files under each task's ``files/`` — plus every
reservation still open, under one lock, so tool calls run in parallel cannot each see room
that only one of them may take.

Three caps, each refused with ``file_refused`` naming its setting:

- ``TASK_FILES_MAX_BYTES`` — one task's files.
- ``USER_FILES_MAX_BYTES`` — the files one person's requests brought into live task
  directories (a file counts for the person who asked when it was saved, as the task's
  ``.fetched.json`` records; files saved before that was recorded count for no one).
- ``FILES_MAX_BYTES`` — every task's files together.

Edges: reservations live in the process. Two processes sharing one ``DATA_DIR`` (a ``run``
command beside ``serve``) each see the other's files once written, not its open reservations.
The person and install totals come from a scan of ``DATA_DIR/tasks`` at most every
``RESCAN_SECONDS`` (the task being written to is measured every time); files removed by expiry
free their room at the next scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import task_files
from .errors import ChannelError

__all__ = ["RESCAN_SECONDS", "FileQuota", "TaskUsage"]

#: Longest the person and install totals rest on an earlier scan of every task directory.
RESCAN_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """What one task directory holds: its bytes and, of those, the bytes each person's requests saved."""

    total: int = 0
    by_person: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Reservation:
    task_dir: Path
    person: str
    size: int


class FileQuota:
    """The install's reservations of disk for task files; one per process, shared by its sessions."""

    def __init__(
        self,
        tasks_root: Path | None = None,
        *,
        person_max: int | None = None,
        install_max: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``tasks_root`` (``DATA_DIR/tasks``) is scanned for the person and install totals when
        ``person_max`` (``USER_FILES_MAX_BYTES``) or ``install_max`` (``FILES_MAX_BYTES``) is set."""
        self.tasks_root = tasks_root
        self.person_max = person_max
        self.install_max = install_max
        self._clock = clock
        self._lock = asyncio.Lock()
        self._open: list[_Reservation] = []
        self._scan: dict[Path, TaskUsage] = {}
        self._scanned_at: float | None = None

    @contextlib.asynccontextmanager
    async def reserve(
        self, task_dir: Path, size: int, *, task_max: int, person: str = "", what: str = "the file"
    ) -> AsyncIterator[None]:
        """Hold ``size`` bytes for ``task_dir`` (and ``person``) while the body writes the file.

        Raises ``file_refused`` before the body runs when the bytes would pass a cap. On leaving,
        the reservation is released whatever happened: a written file is then measured as itself.
        """
        reservation = await self._take(task_dir, size, task_max=task_max, person=person, what=what)
        try:
            yield
        finally:
            await asyncio.shield(self._release(reservation))

    async def _release(self, reservation: _Reservation) -> None:
        """Drop ``reservation``; the scan learns what its task holds now, in the same step."""
        if self._scanned_at is not None:
            with contextlib.suppress(OSError):
                now = await asyncio.to_thread(measure, reservation.task_dir)
                self._scan[reservation.task_dir] = now
        self._open.remove(reservation)

    async def _take(
        self, task_dir: Path, size: int, *, task_max: int, person: str, what: str
    ) -> _Reservation:
        key = _key(task_dir)
        async with self._lock:
            task = await asyncio.to_thread(measure, task_dir)
            mine = [r for r in self._open if r.task_dir == key]
            _check(what, size, "TASK_FILES_MAX_BYTES", "this task's", task_max, task.total, mine)
            if self.person_max is not None or self.install_max is not None:
                await self._refresh(key, task)
                usages = self._scan.values()
                if self.install_max is not None:
                    used = sum(u.total for u in usages)
                    _check(what, size, "FILES_MAX_BYTES", "the install's", self.install_max, used, self._open)
                if self.person_max is not None and person:
                    used = sum(u.by_person.get(person, 0) for u in usages)
                    theirs = [r for r in self._open if r.person == person]
                    _check(what, size, "USER_FILES_MAX_BYTES", "your", self.person_max, used, theirs)
            reservation = _Reservation(key, person, size)
            self._open.append(reservation)
            return reservation

    async def _refresh(self, task_dir: Path, task: TaskUsage) -> None:
        """Every task's usage, rescanned when older than ``RESCAN_SECONDS``; ``task_dir``'s as just
        measured."""
        now = self._clock()
        stale = self._scanned_at is None or now - self._scanned_at >= RESCAN_SECONDS
        if self.tasks_root is not None and stale:
            self._scan = await asyncio.to_thread(scan, self.tasks_root)
            self._scanned_at = now
        self._scan[task_dir] = task


def _check(
    what: str, size: int, setting: str, whose: str, limit: int, used: int, held: list[_Reservation]
) -> None:
    """Refuse when ``used`` on disk, the open reservations ``held`` in scope and ``size`` pass ``limit``."""
    pending = sum(r.size for r in held)
    if used + pending + size <= limit:
        return
    in_use = f"{_mib(used + pending)} of {_mib(limit)} is in use"
    if pending:
        in_use += f" (of which {_mib(pending)} by downloads still running)"
    raise ChannelError(
        "file_refused",
        f"{what} ({_mib(size)}) would pass {whose} file quota: {in_use}. Work with the files "
        f"already fetched, or ask an operator to raise {setting}.",
    )


def _key(task_dir: Path) -> Path:
    """``task_dir`` made absolute without touching the disk: the same task is one key."""
    return Path(os.path.abspath(task_dir))


def scan(tasks_root: Path) -> dict[Path, TaskUsage]:
    """The usage of every task directory under ``tasks_root``, by absolute path."""
    try:
        entries = [p for p in tasks_root.iterdir() if p.is_dir()]
    except OSError:
        return {}
    return {_key(p): measure(p) for p in entries}


def measure(task_dir: Path) -> TaskUsage:
    """What ``task_dir/files`` holds now. A download's temporary ``.part-…`` file is left out: its
    open reservation already counts the most it may grow to."""
    total = sum(size for _, size in _files(task_dir / "files"))
    by_person: Counter[str] = Counter()
    for relative, (person, size) in task_files.owners(task_dir).items():
        with contextlib.suppress(OSError):
            if (task_dir / relative).stat().st_size == size:
                by_person[person] += size
    return TaskUsage(total=total, by_person=dict(by_person))


def _files(files_dir: Path) -> Iterator[tuple[str, int]]:
    for root, _, names in os.walk(files_dir):
        for name in names:
            if name.startswith(".part-"):
                continue
            with contextlib.suppress(OSError):
                yield name, (Path(root) / name).stat().st_size


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
