"""Looking at the other instances (a mixin of :class:`app.runs.scheduler.Scheduler`): a dead one's
conversations taken over (who counts as dead: ``app.runs.takeover``), and the first look at start-up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from storage.base import Store

from .takeover import CONFIRM_S, TakeoverRule

log = logging.getLogger("app.runs.scheduler")

#: Seconds between looks for dead instances whose conversations to take over (a look is two
#: sub-millisecond queries and a ping of the liveness session).
TAKEOVER_INTERVAL = 1.0
#: Most seconds start-up waits for its first look at the other instances and first sweep.
FIRST_LOOK_S = 5.0


class InstanceLooks:
    """The scheduler's looks at the other instances (its state, declared here)."""

    store: Store
    owner: str
    clock: Callable[[], float]
    _rule: TakeoverRule
    _swept: bool
    _accepting: bool
    sweep: Callable[[], Awaitable[int]]

    async def take_over(self) -> int:
        """End the leases of registered instances whose process is gone and drive their
        conversations (and anything else due) now; how many dead instances were found."""
        # Our own liveness first: a database restart ends the session holding it, and then every
        # other instance would take our conversations every few seconds.
        await self.store.register_instance(self.owner, now=self.clock())
        look = await self.store.look_at_instances(self.owner, now=self.clock())
        missing = tuple(o for o in look.missing if o != self.owner)
        dead = self._rule.dead(replace(look, missing=missing), self.clock())
        for owner, reason in dead.items():
            ended = await self.store.expire_leases(owner, now=self.clock())
            log.warning("instance %s is gone (%s); taking over its %d conversations", owner, reason, ended)
        if dead:
            await self.sweep()
        return len(dead)

    async def first_look(self, within: float = FIRST_LOOK_S) -> None:
        """At start-up, before the instance serves: look at the other instances (a dead one's
        conversations are taken over) and resume whatever a previous process left (pending inboxes,
        open effects, expired leases). An instance that answers has done both, so its first sweep
        cannot take a message delivered to another instance after this one was up, and every
        instance alive then was seen alive under our own lock (its death is judged at once). A store
        that slow or failing leaves both to the loops (:meth:`sweep_forever`, :meth:`take_over_forever`)."""
        try:
            async with asyncio.timeout(within):
                await self.take_over()
                await self.sweep()
                self._swept = True
        except TimeoutError:
            log.warning("the first look and sweep took over %.0f s; the loops go on with them", within)
        except Exception:
            log.exception("the first look and sweep failed; the loops retry")

    async def take_over_forever(self, interval: float = TAKEOVER_INTERVAL) -> None:
        while self._accepting:
            try:
                await self.take_over()
            except Exception:
                log.exception("looking for dead instances failed")
            # An owner seen alive went missing: its confirming look comes sooner.
            await asyncio.sleep(min(interval, CONFIRM_S) if self._rule.confirming else interval)
