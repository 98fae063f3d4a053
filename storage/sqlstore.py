"""The :class:`~storage.base.Store` methods, written once over SQL (``statements.py``).

A backend subclasses :class:`SqlStore` and supplies its dialect and four ways to reach its
database: one statement (:meth:`~SqlStore._fetch`, :meth:`~SqlStore._execute`), one procedure
(:meth:`~SqlStore._call`, a transaction in one trip) and one script (:meth:`~SqlStore._script`,
the migration runner). Everything the store does is defined here and in ``statements.py``; the
backends hold only connection plumbing.

This class is the store's one definition: callers name it :class:`~storage.base.Store`, and each
method's docstring (in the ``sqlstore_*.py`` mixins) is its contract.
"""

from __future__ import annotations

from collections.abc import Callable

from . import statements as sql
from ._rows import stats_from_row
from .records import StoreStats
from .schema import migration
from .sqlstore_asks import AskMethods
from .sqlstore_follow_ups import FollowUpMethods
from .sqlstore_leases import LeaseMethods
from .sqlstore_people import PeopleMethods
from .sqlstore_session import SessionMethods
from .sqlstore_tasks import TaskMethods


class SqlStore(TaskMethods, LeaseMethods, SessionMethods, PeopleMethods, FollowUpMethods, AskMethods):
    """Durable state of threadbound: every Store method over the backend's four primitives (module
    doc). Every method is atomic on its own."""

    # -- lifecycle -------------------------------------------------------------------
    async def migrate(self) -> None:
        """Create or upgrade the schema to the current version. Idempotent; safe on every start."""
        prelude = self._migration_prelude()
        await self._script(lambda: migration(self.dialect, prelude))

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the database answers a trivial query."""
        await self._fetch(sql.PING, {})

    def for_another_loop(self) -> SqlStore:
        """A store on the same database for one other event loop (the HTTP edge's thread): its own
        write batching (SQLite, sharing this store's database thread) or its own small pool
        (Postgres, whose connections belong to one loop). Use it and close it on that loop only;
        closing it leaves this store open, and closing this store ends it too."""
        raise NotImplementedError(f"{type(self).__name__} cannot be used from another loop")

    def inline_when(self, nothing_else_to_do: Callable[[], bool]) -> None:
        """``nothing_else_to_do()``: whether this process has nothing else to do now (one run
        working, no delivery waiting for its 200). A backend whose calls hop to a thread of its own (SQLite)
        then makes them on the caller's thread, where the hop costs more than the call; the others
        ignore it."""

    async def stats(self) -> StoreStats:
        """Counts for readiness probes and benchmarks."""
        row = await self._one(sql.STATS)
        assert row is not None  # an aggregate query always yields one row
        return stats_from_row(row)
