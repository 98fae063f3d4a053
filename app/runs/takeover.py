"""Taking over a dead instance's conversations: the scheduler's looks at the other instances
(:class:`Takeover`), and when an owner whose liveness lock is missing counts as dead
(:class:`TakeoverRule`).

Every instance holds a liveness lock that ends with its process (``Store.register_instance``); a
missing lock usually means the process is gone. On Postgres it can also mean that the database
restarted, failed over or terminated every session: then every instance's lock ended at once and
each takes it again on its next look. The rule, for one looking instance:

- A look that does not show our own lock held judges nobody (every lock may just have ended).
- An owner whose lock we saw held under our current lock, and which has been missing from our
  looks for ``CONFIRM_S`` since, while our own lock stayed held, is dead at once. An event that
  ends every session would have ended ours too (a new lock, so a new memory of who was seen); the
  confirmation covers a restart caught while it ends the sessions one by one.
- Any other missing owner (one we never saw held since our lock was taken: we just started, or
  re-registered after a restart) counts as dead once it has been missing for the store's
  ``liveness_grace``, long enough for every live instance to have taken its lock again.
- Where only the process's death ends a lock (``liveness_grace`` 0, SQLite's file locks), a
  missing owner is dead at once.

A wrong judgement (only one instance's session was ended, say by ``pg_terminate_backend``) is
harmless: the old owner's writes are fenced by its lease (``Store.take_lease``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from storage.base import InstanceLook, Store

#: Seconds an owner seen alive must stay missing (while our lock holds) before it counts as dead.
CONFIRM_S = 0.5


class TakeoverRule:
    """Remembers, across looks, who was seen alive under our own lock and since when who is missing."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        #: Our own lock's key the memory below belongs to (None: no look showed it held yet).
        self._session: int | None = None
        #: Owners whose lock a look under ``_session`` showed held.
        self._seen: set[str] = set()
        #: Missing owners and the time they were first seen missing.
        self._suspects: dict[str, float] = {}

    @property
    def confirming(self) -> bool:
        """Whether a missing owner seen alive waits for its confirming look (look again soon)."""
        return any(owner in self._seen for owner in self._suspects)

    def dead(self, look: InstanceLook, now: float) -> dict[str, str]:
        """The owners of ``look.missing`` that count as dead now, each with the reason (for the log)."""
        if self.grace <= 0:
            return {owner: "its liveness lock is free" for owner in look.missing}
        if look.session is None or look.session != self._session:
            # Our own lock ended (or is new): every lock may have ended with it, so who we saw alive
            # says nothing now, and the grace counts from our new lock on.
            self._seen.clear()
            self._suspects.clear()
            self._session = look.session
            if look.session is None:
                return {}
        self._suspects = {owner: self._suspects.get(owner, now) for owner in look.missing}
        dead: dict[str, str] = {}
        for owner, since in self._suspects.items():
            if owner in self._seen and now - since >= CONFIRM_S:
                dead[owner] = "its liveness lock ended while ours held"
            elif now - since >= self.grace:
                dead[owner] = f"its liveness lock stayed missing for {self.grace:g} s"
        for owner in dead:
            del self._suspects[owner]
            self._seen.discard(owner)
        self._seen |= look.live
        return dead


log = logging.getLogger(__name__)

#: Seconds between looks for dead instances whose conversations to take over (a look is two
#: sub-millisecond queries and a ping of the liveness session).
TAKEOVER_INTERVAL = 1.0
#: Most seconds start-up waits for its first look at the other instances and first sweep.
FIRST_LOOK_S = 5.0


class Takeover:
    """The scheduler's looks at the other instances: a dead one's leases ended and its
    conversations driven here (by ``sweep``), and the first look at start-up."""

    def __init__(
        self, store: Store, owner: str, clock: Callable[[], float], sweep: Callable[[], Awaitable[int]]
    ) -> None:
        self.store = store
        #: This instance, whose own liveness each look renews.
        self.owner = owner
        self.clock = clock
        #: Drives every task that is due (``Scheduler.sweep``): a dead owner's, once its leases ended.
        self.sweep = sweep
        #: Which owners whose liveness lock is missing count as dead.
        self.rule = TakeoverRule(getattr(store, "liveness_grace", 0.0))
        self._looking = True

    async def take_over(self) -> int:
        """End the leases of registered instances whose process is gone and drive their
        conversations (and anything else due) now; how many dead instances were found."""
        # Our own liveness first: a database restart ends the session holding it, and then every
        # other instance would take our conversations every few seconds.
        await self.store.register_instance(self.owner, now=self.clock())
        look = await self.store.look_at_instances(self.owner, now=self.clock())
        missing = tuple(o for o in look.missing if o != self.owner)
        dead = self.rule.dead(replace(look, missing=missing), self.clock())
        for owner, reason in dead.items():
            ended = await self.store.expire_leases(owner, now=self.clock())
            log.warning("instance %s is gone (%s); taking over its %d conversations", owner, reason, ended)
        if dead:
            await self.sweep()
        return len(dead)

    async def first_look(self, within: float = FIRST_LOOK_S) -> bool:
        """:meth:`take_over`, then a sweep, within ``within`` seconds; whether both finished (a
        store that slow or failing leaves both to the loops). ``Scheduler.first_look`` says why."""
        try:
            async with asyncio.timeout(within):
                await self.take_over()
                await self.sweep()
                return True
        except TimeoutError:
            log.warning("the first look and sweep took over %.0f s; the loops go on with them", within)
        except Exception:
            log.exception("the first look and sweep failed; the loops retry")
        return False

    async def forever(self, interval: float = TAKEOVER_INTERVAL) -> None:
        """:meth:`take_over` every ``interval`` seconds (sooner while a missing owner seen alive
        waits for its confirming look), until :meth:`stop`."""
        while self._looking:
            try:
                await self.take_over()
            except Exception:
                log.exception("looking for dead instances failed")
            # An owner seen alive went missing: its confirming look comes sooner.
            await asyncio.sleep(min(interval, CONFIRM_S) if self.rule.confirming else interval)

    def stop(self) -> None:
        """End :meth:`forever` after its current look (shutdown)."""
        self._looking = False
