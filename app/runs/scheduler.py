"""Scheduling: at most one agent run per conversation, fed from the durable inbox.

Which task runs when, and nothing about the run itself (that is ``app.runs.run``): leases, their
heartbeat, the sweep, the concurrency cap, wake-ups and the hourly prune of claim keys. Ordering
rules that keep messages from being lost or run twice:

- Ingress appends to the inbox *before* it asks the scheduler to drive a task.
- A wake-up only queues the task: one dispatcher task starts drivers, at a moment when no
  delivery waits for its acknowledgement (``app.runs.ack_gate``) or after ``START_PATIENCE`` at most,
  yielding between starts, so starting runs never competes with the claims the 200s wait for.
- A driver takes the task's lease in the store (so this holds across instances), runs until the
  inbox is empty, releases the lease and then looks at the inbox once more: a message appended
  while another owner held the lease is picked up by that owner's post-release check, by the next
  delivery, or by the sweep.
- During a run the run polls the task's inbox (handed to it as an ``Inbox``) for
  steering messages, which are consumed with the run; its first look goes to the store only
  when a delivery woke the task since the driver read the inbox.
- The lease is renewed by a heartbeat and checked before every write of the run
  (``app.runs.lease``): a driver that lost it stops its run and lets go of the task.
- A driver that failed (a store error, which also ends a run unsaved: ``app.runs.outcome.StoreFailed``)
  has its task driven again after a back-off that grows with each failure in a row; its inbox
  waits meanwhile, and nothing else here drives it.
- A dead instance holds nothing for long: every ``TAKEOVER_INTERVAL`` (and once on start,
  before the instance serves: ``Scheduler.first_look``) the store shows which registered owners'
  liveness locks are held (``Store.look_at_instances``); the owners judged dead
  (``app.runs.takeover``: at once when seen alive earlier under our own unbroken lock, else after
  ``Store.liveness_grace``, since a database restart ends every lock at once) have their leases
  ended and their conversations driven here. ``LEASE_TTL`` only covers a hung process. A false
  judgement is harmless: the old owner's writes are fenced (``Store.take_lease``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

from storage.base import Fence, Store, TaskRecord

from .ack_gate import AckGate
from .lease import Lease
from .person_slots import PersonSlots, first_author
from .run import RunExecutor, RunOutcome
from .start import steering_inbox, take_task
from .stop import StopWatch
from .takeover import FIRST_LOOK_S, TAKEOVER_INTERVAL, Takeover

log = logging.getLogger(__name__)

#: Seconds between prunes of old claim keys by the sweep.
PRUNE_INTERVAL = 3600.0
#: Seconds after a driver failed (its store call, say) before its task is driven again; doubled with
#: each failure in a row, up to ``DRIVER_RETRY_MAX_S``. Until then nothing drives it here (not the
#: sweep, not a delivery: its message waits in the inbox), so a store that stays down is not asked
#: (nor the model) in a loop.
DRIVER_RETRY_S = 1.0
DRIVER_RETRY_MAX_S = 300.0
#: Most seconds run start-ups wait for a moment without acknowledgements in flight.
START_PATIENCE = 0.25
#: Drivers started at once when patience ran out during a sustained burst.
START_BATCH = 8


class Scheduler:
    """Drives tasks with pending work through a :class:`RunExecutor`, one run per task at a time."""

    def __init__(
        self,
        *,
        store: Store,
        executor: RunExecutor,
        lease_ttl: float = 60.0,
        max_concurrent_runs: int = 64,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        claim_retention: float = 604_800.0,
        on_sweep: Callable[[], Awaitable[object]] | None = None,
        ack_gate: AckGate | None = None,
        user_max_runs: int = 4,
    ) -> None:
        self.store = store
        self.executor = executor
        self.lease_ttl = lease_ttl
        # Bursts queue in the durable inbox instead of starting hundreds of runs that starve the acks.
        self._slots = asyncio.Semaphore(max_concurrent_runs)
        # USER_MAX_RUNS: one person's conversations past it wait before taking a run slot.
        self._people = PersonSlots(user_max_runs)
        self.owner = owner or f"instance-{uuid.uuid4().hex[:12]}"
        self.clock = clock
        #: Seconds claim keys (ingress dedupe) are kept; the sweep prunes older ones.
        self.claim_retention = claim_retention
        self._last_prune: float | None = None
        #: Run at the start of every sweep (the approvals' expiry check); its failure is logged.
        self.on_sweep = on_sweep
        self._drivers: dict[str, asyncio.Task[None]] = {}
        #: Tasks woken while their driver ran: it looks at the inbox again before it ends.
        self._again: set[str] = set()
        #: Tasks whose driver failed, with how many times in a row (reset when one ends well).
        self._failures: dict[str, int] = {}
        #: Tasks waiting out the back-off after a failed driver: not driven before it ends.
        self._resting: set[str] = set()
        self._accepting = True
        #: The ack path's right of way (``app.runs.ack_gate``); None: drivers start at once.
        self.ack_gate = ack_gate
        #: Tasks woken but not yet given a driver, in wake-up order; the dispatcher drains it.
        self._wakeups: dict[str, None] = {}
        self._authors: dict[str, str] = {}  # woken tasks' first authors, when told (``notify``)
        self._messages: dict[str, tuple[str, str]] = {}  # woken tasks' claimed messages (``notify``)
        self._woken = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        #: Whether start-up swept already (``first_look``), so the sweep loop begins with a wait.
        self._swept = False
        #: Set (and replaced) whenever the dispatcher started drivers, for ``idle``.
        self._started = asyncio.Event()
        #: The looks at the other instances, and the takeover of a dead one's conversations (its
        #: clock is this scheduler's, which tests may replace).
        self.takeover = Takeover(store, self.owner, lambda: self.clock(), self.sweep)
        #: A person's Stop on a run here: looked for in the store while runs work (``app.runs.stop``).
        self.stops = StopWatch(store, executor, lambda: self._drivers)

    def stop_recorded(self) -> None:
        """A Stop was recorded in this process (``app.runs.stop.request_stop``): look for it now."""
        self.stops.look_now()

    def nothing_else_to_do(self) -> bool:
        """At most one driver at work and no delivery waiting for its 200 (``Store.inline_when``)."""
        return len(self._drivers) <= 1 and not (self.ack_gate is not None and self.ack_gate.busy)

    # -- wake-ups --------------------------------------------------------------------------
    def notify(self, task_id: str, author: str | None = None, message: tuple[str, str] | None = None) -> None:
        """Make sure a driver for ``task_id`` runs in this process soon (it may find the lease
        taken). Cheap: the driver is started by the dispatcher, off the ack path. ``author``: who
        wrote the oldest pending message, when the caller knows (the claim that created the task);
        ``message``: the claimed message's ``(channel, ts)``, whose handle the driver mints in the
        lease's store trip (its run's prompt shows it)."""
        if not self._accepting or task_id in self._resting:
            return  # resting: the end of its back-off drives it (``_driver_done``)
        driver = self._drivers.get(task_id)
        if driver is not None and not driver.done():
            # Its run polls the inbox before each model request and looks again before it lets go; that last
            # look may already be running (on Postgres, on a snapshot older than this message), so
            # the driver is told to look once more.
            self._again.add(task_id)
            return
        self._wakeups[task_id] = None
        if author is not None:
            self._authors[task_id] = author
        if message is not None:
            self._messages[task_id] = message
        self._woken.set()
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.create_task(self._dispatch(), name="dispatcher")

    async def _dispatch(self) -> None:
        """Start drivers for woken tasks when the ack path is quiet (module docstring)."""
        while self._accepting:
            if not self._wakeups:
                self._woken.clear()
                await self._woken.wait()
                continue
            quiet = self.ack_gate is None or await self.ack_gate.quiet(START_PATIENCE)
            started = 0
            while self._wakeups and self._accepting:
                if not quiet and started >= START_BATCH:
                    break  # a sustained burst: a few runs per patience, the acks first
                if quiet and started and self.ack_gate is not None and self.ack_gate.busy:
                    break  # deliveries arrived meanwhile: let them be acknowledged first
                task_id = next(iter(self._wakeups))
                del self._wakeups[task_id]
                self._start(task_id)
                started += 1
                await asyncio.sleep(0)  # the driver's first steps, and anything else ready, go now
            self._started.set()
            self._started = asyncio.Event()

    def _start(self, task_id: str) -> None:
        driver = self._drivers.get(task_id)
        if driver is not None and not driver.done():
            return
        driver = asyncio.create_task(self._drive(task_id), name=f"drive:{task_id}")
        self._drivers[task_id] = driver
        self.stops.watch()
        driver.add_done_callback(self._driver_done)

    def _driver_done(self, driver: asyncio.Task[None]) -> None:
        task_id = driver.get_name().removeprefix("drive:")
        if self._drivers.get(task_id) is driver:
            del self._drivers[task_id]
        if driver.cancelled() or driver.exception() is None:
            self._failures.pop(task_id, None)
            return
        log.error("driver for task %s failed", task_id, exc_info=driver.exception())
        # A store that failed over, say, or a run stopped by a failed store write: what waits for the
        # task (the rest of its run, its message) is looked at again soon, then less and less often.
        if self._accepting:
            failures = self._failures[task_id] = self._failures.get(task_id, 0) + 1
            self._resting.add(task_id)
            delay = min(DRIVER_RETRY_S * 2 ** (failures - 1), DRIVER_RETRY_MAX_S)
            asyncio.get_running_loop().call_later(delay, self._rested, task_id)

    def _rested(self, task_id: str) -> None:
        self._resting.discard(task_id)
        self.notify(task_id)

    # -- the other instances (``app.runs.takeover``) -------------------------------------------
    async def take_over(self) -> int:
        """End the leases of registered instances whose process is gone and drive their
        conversations (and anything else due) now; how many dead instances were found."""
        return await self.takeover.take_over()

    async def first_look(self, within: float = FIRST_LOOK_S) -> None:
        """At start-up, before the instance serves: look at the other instances (a dead one's
        conversations are taken over) and resume whatever a previous process left (pending inboxes,
        open effects, expired leases). An instance that answers has done both, so its first sweep
        cannot take a message delivered to another instance after this one was up, and every
        instance alive then was seen alive under our own lock (its death is judged at once). A store
        that slow or failing leaves both to the loops (:meth:`sweep_forever`, :meth:`take_over_forever`)."""
        self._swept = await self.takeover.first_look(within)

    async def take_over_forever(self, interval: float = TAKEOVER_INTERVAL) -> None:
        await self.takeover.forever(interval)

    # -- the sweep ---------------------------------------------------------------------------
    async def sweep(self) -> int:
        """Drive every task whose inbox or effects are pending and whose lease is free or expired."""
        if self.on_sweep is not None:
            try:
                await self.on_sweep()
            except Exception:
                log.exception("the sweep hook failed")
        task_ids = await self.store.tasks_needing_a_run(now=self.clock())
        for task_id in task_ids:
            self.notify(task_id)
        return len(task_ids)

    async def sweep_forever(self, interval: float) -> None:
        # Start-up's sweep (first_look) is the first, unless it did not finish: a second one right
        # away, in the background, could take a message just delivered to another instance.
        swept, self._swept = self._swept, False
        while self._accepting:
            try:
                if not swept:
                    await self.sweep()
            except Exception:
                log.exception("sweep failed")
            swept = False
            try:
                await self.prune_claims()
            except Exception:
                log.exception("pruning claim keys failed")
            await asyncio.sleep(interval)

    async def prune_claims(self) -> int | None:
        """Drop claim keys older than ``claim_retention``, at most once per ``PRUNE_INTERVAL``
        (the first sweep prunes); None when it was not time yet. Slack retries a delivery for
        minutes only, so older keys dedupe nothing (see ``Store.prune_claims``)."""
        now = self.clock()
        if self._last_prune is not None and now - self._last_prune < PRUNE_INTERVAL:
            return None
        self._last_prune = now  # a failed prune waits for the next interval too
        deleted = await self.store.prune_claims(older_than=now - self.claim_retention)
        if deleted > 0:
            log.info("pruned %d claim keys older than %.0f s", deleted, self.claim_retention)
        try:
            # Instances that stopped (or died) holding nothing: their rows and lock files go too.
            if forgotten := await self.store.prune_instances(now=now):
                log.info("forgot %d stopped instances", forgotten)
        except Exception:
            log.exception("pruning stopped instances failed")
        return deleted

    async def idle(self) -> None:
        """Wait until no driver is running or waiting to start (tests, the `run` command)."""
        while self._drivers or (self._wakeups and self._accepting):
            if self._drivers:
                await asyncio.gather(*list(self._drivers.values()), return_exceptions=True)
            else:
                await self._started.wait()

    async def shutdown(self, grace: float, cancel_wait: float | None = None) -> None:
        """Stop taking work, let running turns finish for ``grace`` seconds, then cancel the rest.
        Cancelled runs leave their inbox pending and release their leases, so the next start resumes them.
        ``cancel_wait``: seconds the cancelled runs get to clean up before shutdown goes on without them
        (None: as long as they take); one stuck on Slack or the store leaves its lease to expire."""
        self._accepting = False
        self.takeover.stop()
        await self.stops.close()
        # Woken tasks not started yet keep their inbox: the next start's sweep resumes them.
        self._wakeups.clear()
        self._authors.clear()
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        drivers = list(self._drivers.values())
        if drivers:
            _done, pending = await asyncio.wait(drivers, timeout=grace)
            for driver in pending:
                driver.cancel()
            if pending:
                _, stuck = await asyncio.wait(pending, timeout=cancel_wait)
                if stuck:
                    log.warning("%d cancelled runs did not end in time; their leases expire", len(stuck))

    # -- driving one task under its lease ----------------------------------------------------
    async def _drive(self, task_id: str) -> None:
        message = self._messages.pop(task_id, None)
        async with self._slots:
            person = self._authors.pop(task_id, None)  # else read: whom the run counts against
            person = first_author(await self.store.pending_inbox(task_id)) if person is None else person
            if not self._people.full(person):
                async with self._people.hold(person):  # taken at once: nothing awaited since full()
                    await self._drive_leased(task_id, message)
                return
        # This person has USER_MAX_RUNS conversations running: wait holding no run slot, then run.
        async with self._people.hold(person), self._slots:
            await self._drive_leased(task_id, message)

    async def _drive_leased(self, task_id: str, message: tuple[str, str] | None = None) -> None:
        waiting = False
        while self._accepting:
            self._again.discard(task_id)
            fence, state, minted = await take_task(  # one trip on SQLite
                self.store,
                self.executor.adapter,
                task_id,
                owner=self.owner,
                ttl=self.lease_ttl,
                now=self.clock(),
                message=message,
            )
            message = None  # the next lap's state is read afresh
            if fence is None:
                return  # another instance runs it; it will see our inbox item
            lease = self._lease(fence)
            heartbeat = asyncio.create_task(lease.heartbeat(), name=f"lease:{task_id}")
            try:
                while self._accepting and not lease.lost.is_set():
                    state = state if state is not None else await self.store.run_state(task_id)
                    task = state.task
                    if not state.items and not state.effects and not (task is not None and task.run_open):
                        break
                    inbox = steering_inbox(self.store, task_id, self._again)
                    outcome = await self.executor.run_inbox(
                        task_id,
                        state.items,
                        state.effects,
                        inbox,
                        guard=lease.check,
                        fence=fence,
                        task=task,
                        start=state,
                        minted=minted,
                    )
                    minted = []
                    state = None  # the next lap reads it afresh
                    if outcome.status == "waiting":
                        waiting = True  # an approval is undecided: its decision wakes the task again
                        break
            finally:
                await _stop(heartbeat)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.store.release_lease(task_id, owner=self.owner))
            if lease.lost.is_set():
                return  # the new owner has the inbox
            if waiting and await self.executor.waiting(task_id):
                return  # the decision wakes it (a decision made since our check is seen just above)
            waiting = False
            if not self._accepting:
                return
            if not await self.store.pending_inbox(task_id) and task_id not in self._again:
                return

    def _lease(self, fence: Fence) -> Lease:
        """The lease just acquired (``fence``), as the heartbeat and the run's writes see it."""
        return Lease(
            self.store, fence.task_id, owner=self.owner, ttl=self.lease_ttl, clock=self.clock, fence=fence
        )

    # -- direct use (the `run` command) ----------------------------------------------------
    async def run_prompt(self, task: TaskRecord, prompt: str, *, adopt_first_root: bool) -> RunOutcome:
        """Run ``prompt`` on ``task`` under its lease; raises when another run holds it."""
        fence = await self.store.take_lease(
            task.task_id, owner=self.owner, ttl=self.lease_ttl, now=self.clock()
        )
        if fence is None:
            raise RuntimeError("that conversation is busy with another run; try again when it finishes")
        lease = self._lease(fence)
        heartbeat = asyncio.create_task(lease.heartbeat(), name=f"lease:{task.task_id}")
        try:
            return await self.executor.run_prompt(
                task,
                prompt,
                adopt_first_root=adopt_first_root,
                inbox=partial(self.store.pending_inbox, task.task_id),
                guard=lease.check,
                fence=fence,
            )
        finally:
            await _stop(heartbeat)
            await self.store.release_lease(task.task_id, owner=self.owner)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
