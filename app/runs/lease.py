"""A conversation's lease as this process holds it: renewed by a heartbeat, checked before writes.

The store's lease (owner, expiry) keeps one run per conversation across instances.
While a run works, :meth:`Lease.heartbeat` renews it every third of ``ttl``. When a
renewal finds another owner, or no renewal succeeded for ``ttl`` (a hung process, an
unreachable database), the lease counts as lost: :attr:`Lease.lost` is set and
:meth:`Lease.check` — awaited before every write of the run, and before each attempt of a
Slack write held back by pacing or 429s (``channel.contract.WRITE_GUARD``) — raises
:class:`~app.runs.outcome.RunStopped`, so the run ends before it posts anything more. A
check more than :data:`CONFIRM_AFTER` seconds after the store last confirmed the
lease asks the store first, so even a process that was frozen cannot write on an old
belief. The lease's :class:`~storage.base.Fence` goes with every durable write of the
run, so a write that slips past the check is still refused by the store (Fencing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from channel.contract import WRITE_GUARD_LAG
from storage.base import Fence, Store, StoreError

from .outcome import RunStopped

log = logging.getLogger(__name__)

#: Seconds a store confirmation of the lease counts for: a check later than this (before a Slack
#: write or a model request) asks the store again (one round trip). A survivor counts on it to know
#: how long a fenced run may still start a Slack write (``channel.contract.WRITE_GUARD_LAG``).
CONFIRM_AFTER = WRITE_GUARD_LAG


@dataclass(eq=False)
class Lease:
    """The lease of ``task_id`` this process acquired (module doc); ``clock`` the store's time."""

    store: Store
    task_id: str
    _: KW_ONLY
    owner: str
    ttl: float
    clock: Callable[[], float]
    #: The acquisition this lease is (its writes carry it); None: renewals check the owner only.
    fence: Fence | None = None
    #: Set once this process may no longer act for the task.
    lost: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        # The moment the store last confirmed the lease (acquired just before this object is made).
        self._confirmed = self.clock()

    async def renew(self) -> bool:
        """Extend the lease in the store; False (and ``lost`` set) when it is someone else's now."""
        now = self.clock()
        if await self.store.renew_lease(
            self.task_id, owner=self.owner, ttl=self.ttl, now=now, fence=self.fence
        ):
            self._confirmed = now
            return True
        self._lose("another owner took it")
        return False

    async def heartbeat(self) -> None:
        """Renew every third of ``ttl`` until cancelled or lost."""
        while not self.lost.is_set():
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.renew()
            except StoreError:
                log.exception("lease heartbeat failed for task %s", self.task_id)
                if self.clock() - self._confirmed >= self.ttl:
                    self._lose("no renewal for a whole lease")

    async def check(self) -> None:
        """Raise ``RunStopped`` unless this process still holds the lease. Free while the store
        confirmed it within :data:`CONFIRM_AFTER` seconds; later it asks the store."""
        if not self.lost.is_set() and self.clock() - self._confirmed >= min(CONFIRM_AFTER, self.ttl / 2):
            try:
                await self.renew()
            except StoreError:
                if self.clock() - self._confirmed >= self.ttl:
                    self._lose("no renewal for a whole lease")
        if self.lost.is_set():
            raise RunStopped(f"lost the lease of task {self.task_id}")

    def _lose(self, why: str) -> None:
        if not self.lost.is_set():
            log.warning(
                "lost the lease of task %s (%s); its run stops before the next write", self.task_id, why
            )
            self.lost.set()
