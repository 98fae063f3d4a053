"""The database a SQL store reaches (:class:`Database`): the few ways a backend runs statements, and
the liveness locks of the instances sharing it. :class:`~storage.sqlite.SQLiteDatabase` and
:class:`~storage.postgres.PostgresDatabase` implement it; the store's statement groups
(``sqlstore_*.py``) are written once over it."""

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


#: The reads that follow a write, given the write's first returned row (``Database.write_then_reads``).
Reads = Callable[[Row | None], Sequence[tuple[Statement, Mapping[str, Any]]]]
#: A write's first returned row (None: none) and the rows of each read after it.
WriteRead = tuple[Row | None, list[Sequence[Row]]]


class Database(ABC):
    """One SQL database as a store uses it: statements, procedures and scripts run there, and the
    liveness locks of the instances sharing it. Each call is atomic on its own."""

    dialect: ClassVar[Dialect]
    #: Seconds an owner's liveness lock must be seen missing before it counts as dead (unless seen
    #: alive under the looker's unbroken lock, ``app.runs.takeover``): 0 where only the process's
    #: death ends it (SQLite's file lock), more where a database restart ends every lock at once
    #: (Postgres).
    liveness_grace: float = 0.0

    # -- statements --------------------------------------------------------------------
    @abstractmethod
    async def fetch(self, statement: Statement, params: Mapping[str, Any]) -> Sequence[Row]:
        """The rows of one statement, run on its own (atomic; autocommitted)."""

    @abstractmethod
    async def execute(self, statement: Statement, params: Mapping[str, Any]) -> int:
        """Run one statement on its own; how many rows it changed."""

    @abstractmethod
    async def call(self, procedure: Procedure, params: Mapping[str, Any], *, synced: bool = True) -> Row:
        """The result row of ``procedure``, run as one transaction in one database trip.
        ``synced=False``: this call needs no disk sync of its own (``Statement.synced``)."""

    async def reads(self, reads: Sequence[tuple[Statement, Mapping[str, Any]]]) -> list[Sequence[Row]]:
        """The rows of each read, in order; a backend may make them one database trip (SQLite: one
        job on its database thread)."""
        return [await self.fetch(statement, params) for statement, params in reads]

    async def write_then_reads(self, write: Statement, params: Mapping[str, Any], reads: Reads) -> WriteRead:
        """``write``'s first returned row (None: none), then the rows of each read ``reads(row)``
        names; a backend may make it one database trip (SQLite: one job, in the write's batch)."""
        rows = await self.fetch(write, params)
        row = rows[0] if rows else None
        return row, await self.reads(reads(row))

    @abstractmethod
    async def script(self, make: Callable[[], Script]) -> Any:
        """Drive the script ``make()`` returns in one transaction; its return value. ``make`` is
        called again when the backend reruns the transaction (a generator runs only once)."""

    def migration_prelude(self) -> Sequence[tuple[Statement, Mapping[str, Any]]]:
        """Statements the migration transaction starts with (Postgres: a lock, the schema)."""
        return ()

    async def one(self, statement: Statement, **params: Any) -> Row | None:
        """The first row of one statement (None: none)."""
        rows = await self.fetch(statement, params)
        return rows[0] if rows else None

    # -- liveness locks -------------------------------------------------------------------
    @abstractmethod
    async def hold_liveness(self, owner: str) -> tuple[int, bool]:
        """Take the lock that ends with this process (or its connection): its key, and whether
        it was taken now (False: this database object holds it already, under the same key)."""

    @abstractmethod
    async def dead(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        """Which of ``(owner, lock key)`` no longer hold their liveness lock."""

    @abstractmethod
    async def lock_states(
        self, owner: str, owners: Sequence[tuple[str, int]]
    ) -> tuple[int | None, dict[str, bool]]:
        """One snapshot of the liveness locks: the key of ``owner``'s own lock if held (None: not),
        and for each of ``owners`` ``(owner, lock key)`` whose liveness can be told, whether it is held."""

    async def gone(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        """Which of ``owners`` have ended, cleanly or not (pruning: they hold no lease)."""
        return await self.dead(owners)

    async def forget_liveness(self, owner: str) -> None:
        """Clean up what a dead ``owner``'s liveness lock left behind (SQLite: its lock file)."""
        return None  # Postgres: nothing (the lock ended with its session)

    # -- lifecycle ------------------------------------------------------------------------
    @abstractmethod
    def for_another_loop(self) -> Database:
        """The same database for one other event loop (``SqlStore.for_another_loop``)."""

    def inline_when(self, nothing_else_to_do: Callable[[], bool]) -> None:
        """What ``SqlStore.inline_when`` says; only SQLite acts on it."""
        return None  # Postgres: every call is a network trip anyway

    @abstractmethod
    async def close(self) -> None:
        """Release connections. The database object is unusable afterwards."""


async def decide(db: Database, procedure: Procedure, **params: Any) -> bool:
    """Run a card's decision (``card_statements.decide_card``) under a fresh ``decision_id``: True
    for the one call whose decision won."""
    return bool((await db.call(procedure, {**params, "decision_id": new_id()}))["won"])
