"""The statement group of leases and of the liveness of their owners, over one
:class:`~storage.sqlcore.Database`: the store hands each of these calls here; each method's contract
is the docstring of the :class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

from . import statements as sql
from ._rows import from_row
from .records import Fence, InstanceLook, LeaseRecord
from .sqlcore import Database, new_id


def acquisition(task_id: str, owner: str, ttl: float, now: float) -> dict[str, object]:
    """The parameters of ``ACQUIRE_LEASE`` for ``owner`` taking ``task_id`` until ``now + ttl``."""
    return {"task_id": task_id, "owner": owner, "expires_at": now + ttl, "now": now, "token": new_id()}


class Leases:
    """Taking, renewing and releasing leases; instances and their liveness; written once over SQL."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        return await self.take_lease(task_id, owner=owner, ttl=ttl, now=now) is not None

    async def take_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> Fence | None:
        row = await self._db.one(sql.ACQUIRE_LEASE, **acquisition(task_id, owner, ttl, now))
        return None if row is None else Fence(task_id, owner, str(row["token"]))

    async def renew_lease(
        self, task_id: str, *, owner: str, ttl: float, now: float, fence: Fence | None = None
    ) -> bool:
        token = None if fence is None else fence.token
        row = await self._db.one(
            sql.RENEW_LEASE, task_id=task_id, owner=owner, expires_at=now + ttl, token=token
        )
        return row is not None

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        await self._db.execute(sql.RELEASE_LEASE, {"task_id": task_id, "owner": owner})

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        row = await self._db.one(sql.GET_LEASE, task_id=task_id)
        return None if row is None else from_row(LeaseRecord, row)

    # -- instances -----------------------------------------------------------------------
    async def register_instance(self, owner: str, *, now: float) -> bool:
        lock_key, fresh = await self._db.hold_liveness(owner)
        if fresh:
            await self._db.execute(sql.REGISTER_INSTANCE, {"owner": owner, "lock_key": lock_key, "now": now})
        return fresh

    async def dead_owners(self, *, now: float) -> list[str]:
        return list((await self.look_at_instances("", now=now)).missing)

    async def look_at_instances(self, owner: str, *, now: float) -> InstanceLook:
        rows = await self._db.fetch(sql.REGISTERED_INSTANCES, {"now": now})
        keys = [(str(r["owner"]), int(r["lock_key"])) for r in rows]
        session, held = await self._db.lock_states(owner, keys)
        leasing = [str(r["owner"]) for r in rows if r["leasing"]]
        live = frozenset(o for o, alive in held.items() if alive)
        return InstanceLook(session, live, tuple(o for o in leasing if held.get(o) is False))

    async def expire_leases(self, owner: str, *, now: float) -> int:
        ended = await self._db.execute(sql.EXPIRE_LEASES, {"owner": owner, "now": now})
        await self._db.execute(sql.FORGET_INSTANCE, {"owner": owner})
        await self._db.forget_liveness(owner)
        return ended

    async def prune_instances(self, *, now: float) -> int:
        rows = await self._db.fetch(sql.IDLE_INSTANCES, {"now": now})
        keys = {str(r["owner"]): int(r["lock_key"]) for r in rows}
        pruned = 0
        for owner in await self._db.gone(list(keys.items())):
            params = {"owner": owner, "lock_key": keys[owner], "now": now}
            if await self._db.execute(sql.FORGET_IDLE_INSTANCE, params):
                await self._db.forget_liveness(owner)
                pruned += 1
        return pruned
