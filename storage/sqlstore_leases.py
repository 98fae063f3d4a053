"""The :class:`~storage.base.Store` methods of leases and of the liveness of their owners, mixed
into :class:`~storage.sqlstore.SqlStore` over the same four primitives (``sqlcore.py``)."""

from __future__ import annotations

from . import statements as sql
from ._rows import from_row
from .records import Fence, InstanceLook, LeaseRecord
from .sqlcore import SqlCore, new_id


def acquisition(task_id: str, owner: str, ttl: float, now: float) -> dict[str, object]:
    """The parameters of ``ACQUIRE_LEASE`` for ``owner`` taking ``task_id`` until ``now + ttl``."""
    return {"task_id": task_id, "owner": owner, "expires_at": now + ttl, "now": now, "token": new_id()}


class LeaseMethods(SqlCore):
    """Taking, renewing and releasing leases; instances and their liveness; written once over SQL."""

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        """Take the lease if it is free, expired, or already ``owner``'s. Atomic across instances."""
        return await self.take_lease(task_id, owner=owner, ttl=ttl, now=now) is not None

    async def take_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> Fence | None:
        """:meth:`acquire_lease`, returning the acquisition's :class:`Fence` (None: not taken). An
        owner extending its own live lease keeps its fence; any other acquisition gets a new one."""
        row = await self._one(sql.ACQUIRE_LEASE, **acquisition(task_id, owner, ttl, now))
        return None if row is None else Fence(task_id, owner, str(row["token"]))

    async def renew_lease(
        self, task_id: str, *, owner: str, ttl: float, now: float, fence: Fence | None = None
    ) -> bool:
        """Extend ``owner``'s lease (only the acquisition ``fence`` names, when given); False when
        the lease is no longer ``owner``'s (it was lost)."""
        token = None if fence is None else fence.token
        row = await self._one(
            sql.RENEW_LEASE, task_id=task_id, owner=owner, expires_at=now + ttl, token=token
        )
        return row is not None

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        """Drop the lease if ``owner`` holds it; otherwise do nothing."""
        await self._execute(sql.RELEASE_LEASE, {"task_id": task_id, "owner": owner})

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        row = await self._one(sql.GET_LEASE, task_id=task_id)
        return None if row is None else from_row(LeaseRecord, row)

    # -- instances -----------------------------------------------------------------------
    #: Seconds an owner's liveness lock must be seen missing before it counts as dead (unless seen
    #: alive under the looker's unbroken lock, ``app.runs.takeover``): 0 where only the process's death
    #: ends it (SQLite's file lock), more where a database restart ends every lock at once (Postgres).
    liveness_grace: float = 0.0

    async def register_instance(self, owner: str, *, now: float) -> bool:
        """Tie ``owner``'s liveness to this store object until :meth:`close`: a session-level
        advisory lock on Postgres (the database ends it with the connection), a file lock next to
        the SQLite database (the kernel ends it with the process). Owners that never registered are
        judged by their lease's expiry alone. Calling it again is cheap and takes the lock anew if
        it was lost (a Postgres restart ended the session); True when the lock was taken now.
        Raises ``StoreError`` when ``owner`` is alive already elsewhere."""
        lock_key, fresh = await self._hold_liveness(owner)
        if fresh:
            await self._execute(sql.REGISTER_INSTANCE, {"owner": owner, "lock_key": lock_key, "now": now})
        return fresh

    async def dead_owners(self, *, now: float) -> list[str]:
        """Registered owners of unexpired leases whose liveness has ended (their process is gone)."""
        return list((await self.look_at_instances("", now=now)).missing)

    async def look_at_instances(self, owner: str, *, now: float) -> InstanceLook:
        """Which registered owners' liveness locks are held and which lease holders' are not, and
        whether ``owner``'s own lock (registered through this store) is held at that moment."""
        rows = await self._fetch(sql.REGISTERED_INSTANCES, {"now": now})
        keys = [(str(r["owner"]), int(r["lock_key"])) for r in rows]
        session, held = await self._lock_states(owner, keys)
        leasing = [str(r["owner"]) for r in rows if r["leasing"]]
        live = frozenset(o for o, alive in held.items() if alive)
        return InstanceLook(session, live, tuple(o for o in leasing if held.get(o) is False))

    async def expire_leases(self, owner: str, *, now: float) -> int:
        """End every lease of ``owner`` (a dead instance's) now and forget the instance, so its
        tasks are due at once (:meth:`tasks_needing_a_run`); how many leases ended."""
        ended = await self._execute(sql.EXPIRE_LEASES, {"owner": owner, "now": now})
        await self._execute(sql.FORGET_INSTANCE, {"owner": owner})
        await self._forget_liveness(owner)
        return ended

    async def prune_instances(self, *, now: float) -> int:
        """Forget registered instances that hold no unexpired lease and whose liveness has ended
        (crashed, or stopped cleanly): their rows, and on SQLite their lock files; how many.
        An instance that registers again meanwhile (a new lock key) is kept."""
        rows = await self._fetch(sql.IDLE_INSTANCES, {"now": now})
        keys = {str(r["owner"]): int(r["lock_key"]) for r in rows}
        pruned = 0
        for owner in await self._gone(list(keys.items())):
            params = {"owner": owner, "lock_key": keys[owner], "now": now}
            if await self._execute(sql.FORGET_IDLE_INSTANCE, params):
                await self._forget_liveness(owner)
                pruned += 1
        return pruned
