"""A person's Stop: the run in progress in a conversation ends at once, for good.

Where a Stop comes from — Slack's agent session Stop button (``agent_session_stopped``), the
playground's Stop, ``/threadbound stop`` — it is one call, :func:`request_stop`, which records it in
the store (``Store.request_stop``): only while the conversation's lease is held, so a Stop between
runs does nothing. The instance running the conversation notices it — at once when the Stop reached
that instance (``scheduler``), else within :data:`POLL_S` seconds (``StopWatch``, owned by the
scheduler, polls the store for its running tasks while it has any) — and halts the run
(:meth:`app.runs.run.RunExecutor.halt`): the model request is cancelled, open streams are finished as
they stand, nothing more is posted by that turn, and the stop is settled in one fenced transaction
(``Store.settle_stop``): the turn's transcript saved with a note of who stopped it (so the model
learns it at its next turn), its inbox items consumed. The person who stopped it is told privately.

A run that crashed (or lost its lease) before settling leaves the stop in the store: the next run of
the task settles it first and takes none of the stopped turn's messages up again (invariant
"A stop is final", docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection
from typing import Protocol

from storage.base import Store, StoreError

log = logging.getLogger(__name__)

#: Seconds between looks at the store for stops of this instance's running tasks (while it has any).
POLL_S = 0.5
#: What the person who pressed Stop is told, privately.
STOPPED_NOTICE = "Stopped. What was already posted stays; send a new message to go on."


def stopped_note(name: str) -> str:
    """The note the stopped turn ends with in the transcript: the model reads it at its next turn."""
    who = name or "a person in the conversation"
    return (
        f"(This turn was stopped by {who} with Slack's Stop before it finished. Nothing more was posted; "
        "what was already posted stays in the thread.)"
    )


class Halts(Protocol):
    """What the watcher stops runs through (``app.runs.run.RunExecutor``)."""

    def halt(self, task_id: str, by_user: str) -> bool:
        """Halt the task's run in progress here; False when none is (nothing happens)."""


class StopWatch:
    """Polls the store for stops of the tasks this instance runs, and halts their runs (module doc)."""

    def __init__(self, store: Store, halts: Halts, running: Callable[[], Collection[str]]) -> None:
        self._store = store
        self._halts = halts
        self._running = running
        self._task: asyncio.Task[None] | None = None
        self._now = asyncio.Event()

    def watch(self) -> None:
        """Make sure the poll runs (a run started); it ends by itself once nothing runs here."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="stop-watch")

    def look_now(self) -> None:
        """A stop was just recorded here: look at once instead of at the next poll."""
        self._now.set()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        while self._running():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._now.wait()
            self._now.clear()
            running = list(self._running())
            if not running:
                return
            try:
                stops = await self._store.stops_of(running)
            except StoreError as exc:
                log.warning("could not look for stops: %s", exc)
                continue
            for stop in stops:
                if self._halts.halt(stop.task_id, stop.by_user):
                    log.info("task %s stopped by a person; its run halts", stop.task_id)


class Stopper(Protocol):
    """The scheduler's side of a Stop recorded in its own process (``app.runs.scheduler.Scheduler``)."""

    def stop_recorded(self) -> None: ...


async def request_stop(
    store: Store,
    conversation: str,
    thread: str,
    by_user: str,
    *,
    scheduler: Stopper | None = None,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Stop the run in progress in ``(conversation, thread)`` on behalf of ``by_user``, on whichever
    instance runs it. True when a run was in progress and is being stopped; False when nothing runs
    there (a Stop between runs does nothing). ``scheduler``: this process's, which then looks at once."""
    task_id = await store.request_stop(conversation, thread, by_user=by_user, now=clock())
    if task_id is None:
        return False
    if scheduler is not None:
        scheduler.stop_recorded()
    return True
