"""Liveness locks for SQLite: one file lock per running instance, next to the database.

An instance holds ``<database>.instances/<owner>.lock`` locked (``flock``) for as long as its
store is open. The kernel drops the lock when the process dies, however it dies, so another
process on the same machine — a restart, or a second process on the same ``DATA_DIR`` — can
tell a dead owner (the lock is free) from a live one (the lock is held), without waiting for
its leases to expire. All of it runs in worker threads: file operations block.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
from collections.abc import Sequence
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class FileLiveness:
    def __init__(self, database: str) -> None:
        self._dir = Path(f"{database}.instances")
        #: Open descriptors of the locks this process holds, by owner.
        self._held: dict[str, int] = {}

    def _path(self, owner: str) -> Path:
        return self._dir / f"{_UNSAFE.sub('_', owner)[:100]}.lock"

    def holds(self, owner: str) -> bool:
        return owner in self._held

    async def hold(self, owner: str) -> None:
        """Lock ``owner``'s file for this process's life (until :meth:`release`); OSError
        (BlockingIOError) when a live process holds it already."""
        self._held[owner] = await asyncio.to_thread(self._lock, self._path(owner))

    def _lock(self, path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return fd

    async def dead(self, owners: Sequence[str]) -> list[str]:
        """Those of ``owners`` whose lock file exists and is not held by any process."""
        return await asyncio.to_thread(self._dead, owners)

    def _dead(self, owners: Sequence[str]) -> list[str]:
        return [owner for owner, alive in self._states(owners).items() if not alive]

    async def states(self, owners: Sequence[str]) -> dict[str, bool]:
        """Whether each of ``owners`` is alive (its lock held, by this process or another) or dead
        (its lock file free); owners without a lock file are left out (never registered here)."""
        return await asyncio.to_thread(self._states, owners)

    def _states(self, owners: Sequence[str]) -> dict[str, bool]:
        found: dict[str, bool] = {}
        for owner in owners:
            if owner in self._held:
                found[owner] = True
                continue
            path = self._path(owner)
            if not path.exists():
                continue  # never registered here: only its lease's expiry speaks for it
            try:
                fd = self._lock(path)
            except BlockingIOError:
                found[owner] = True
                continue
            except OSError:
                continue
            os.close(fd)
            found[owner] = False
        return found

    async def gone(self, owners: Sequence[str]) -> list[str]:
        """Those of ``owners`` not alive here: lock file free, or no lock file at all."""
        return await asyncio.to_thread(self._gone, owners)

    def _gone(self, owners: Sequence[str]) -> list[str]:
        missing = [o for o in owners if o not in self._held and not self._path(o).exists()]
        return missing + self._dead([o for o in owners if o not in missing])

    async def forget(self, owner: str) -> None:
        """Remove a dead owner's lock file."""
        await asyncio.to_thread(self._unlink, self._path(owner))

    async def release(self) -> None:
        """Unlock and remove this process's lock files (a clean shutdown)."""
        held, self._held = self._held, {}
        for owner, fd in held.items():
            await asyncio.to_thread(self._unlink, self._path(owner))
            os.close(fd)

    @staticmethod
    def _unlink(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
