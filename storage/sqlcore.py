"""What every SQL store is built on: the backend's four primitives (see ``sqlstore.py``)."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from .records import Fence, StoreError
from .sql import Dialect, Procedure, Row, Script, Statement


def new_id() -> str:
    return uuid.uuid4().hex


def fence_token(task_id: str, fence: Fence | None) -> str | None:
    """The token a fenced write of ``task_id`` carries (None: unfenced)."""
    if fence is None:
        return None
    if fence.task_id != task_id:
        raise StoreError(f"a fence of task {fence.task_id!r} cannot guard a write of task {task_id!r}")
    return fence.token


#: The reads that follow a write, given the write's first returned row (``SqlCore._write_then_reads``).
Reads = Callable[[Row | None], Sequence[tuple[Statement, Mapping[str, Any]]]]
#: A write's first returned row (None: none) and the rows of each read after it.
WriteRead = tuple[Row | None, list[Sequence[Row]]]


class SqlCore(ABC):
    """The primitives a backend supplies, and the one helper built on them."""

    dialect: ClassVar[Dialect]

    # -- what a backend supplies ---------------------------------------------------
    @abstractmethod
    async def _fetch(self, statement: Statement, params: Mapping[str, Any]) -> Sequence[Row]:
        """The rows of one statement, run on its own (atomic; autocommitted)."""

    @abstractmethod
    async def _execute(self, statement: Statement, params: Mapping[str, Any]) -> int:
        """Run one statement on its own; how many rows it changed."""

    @abstractmethod
    async def _call(self, procedure: Procedure, params: Mapping[str, Any], *, synced: bool = True) -> Row:
        """The result row of ``procedure``, run as one transaction in one database trip.
        ``synced=False``: this call needs no disk sync of its own (``Statement.synced``)."""

    async def _reads(self, reads: Sequence[tuple[Statement, Mapping[str, Any]]]) -> list[Sequence[Row]]:
        """The rows of each read, in order; a backend may make them one database trip (SQLite: one
        job on its database thread)."""
        return [await self._fetch(statement, params) for statement, params in reads]

    async def _write_then_reads(self, write: Statement, params: Mapping[str, Any], reads: Reads) -> WriteRead:
        """``write``'s first returned row (None: none), then the rows of each read ``reads(row)``
        names; a backend may make it one database trip (SQLite: one job, in the write's batch)."""
        rows = await self._fetch(write, params)
        row = rows[0] if rows else None
        return row, await self._reads(reads(row))

    @abstractmethod
    async def _script(self, make: Callable[[], Script]) -> Any:
        """Drive the script ``make()`` returns in one transaction; its return value. ``make`` is
        called again when the backend reruns the transaction (a generator runs only once)."""

    @abstractmethod
    async def _hold_liveness(self, owner: str) -> tuple[int, bool]:
        """Take the lock that ends with this process (or its connection): its key, and whether
        it was taken now (False: this store holds it already, under the same key)."""

    @abstractmethod
    async def _dead(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        """Which of ``(owner, lock key)`` no longer hold their liveness lock."""

    @abstractmethod
    async def _lock_states(
        self, owner: str, owners: Sequence[tuple[str, int]]
    ) -> tuple[int | None, dict[str, bool]]:
        """One snapshot of the liveness locks: the key of ``owner``'s own lock if held (None: not),
        and for each of ``owners`` ``(owner, lock key)`` whose liveness can be told, whether it is held."""

    async def _gone(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        """Which of ``owners`` have ended, cleanly or not (pruning: they hold no lease)."""
        return await self._dead(owners)

    async def _forget_liveness(self, owner: str) -> None:
        """Clean up what a dead ``owner``'s liveness lock left behind (SQLite: its lock file)."""
        return None  # Postgres: nothing (the lock ended with its session)

    def _migration_prelude(self) -> Sequence[tuple[Statement, Mapping[str, Any]]]:
        """Statements the migration transaction starts with (Postgres: a lock, the schema)."""
        return ()

    @abstractmethod
    async def close(self) -> None:
        """Release connections. The store is unusable afterwards."""

    async def _decide(self, procedure: Procedure, **params: Any) -> bool:
        """Run a card's decision (``card_statements.decide_card``) under a fresh ``decision_id``:
        True for the one call whose decision won."""
        return bool((await self._call(procedure, {**params, "decision_id": new_id()}))["won"])

    async def _one(self, statement: Statement, **params: Any) -> Row | None:
        rows = await self._fetch(statement, params)
        return rows[0] if rows else None
