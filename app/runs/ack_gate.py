"""The ack path's right of way: run start-ups wait for a moment without deliveries in flight.

Every request on ``/slack/events`` is counted from its arrival until its answer is written
(:meth:`AckGate.acking`). The scheduler starts agent runs — lease, inbox, prompt rendering,
progress, the first model request — only when :meth:`AckGate.quiet` says no delivery is
waiting for its 200, or after ``patience`` seconds at most, so a burst of new conversations
is acknowledged first and answered right after, instead of slowing every acknowledgement.

Deliveries may be counted from another thread (the HTTP edge runs on a loop of its own,
``app.intake.edge_thread``) or reported by the edge's own process (``app.intake.edge_process``);
the waiting side (:meth:`AckGate.quiet`) belongs to the loop the
gate was made on, which hears of changes through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator


class AckGate:
    def __init__(self) -> None:
        self._in_flight = 0
        self._count = threading.Lock()
        self._quiet = asyncio.Event()
        self._quiet.set()
        #: The loop waiting in ``quiet``: the one running when the gate was made, if any.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def in_flight(self) -> int:
        """Deliveries waiting for their acknowledgement."""
        return self._in_flight

    @property
    def busy(self) -> bool:
        """A delivery is waiting for its acknowledgement."""
        return self._in_flight > 0

    @contextlib.contextmanager
    def acking(self) -> Iterator[None]:
        """Count one delivery from arrival to answer (on any thread)."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def enter(self) -> None:
        """One more delivery waits for its answer (on any thread; the edge's own process reports
        its deliveries in flight through these two)."""
        with self._count:
            self._in_flight += 1
            changed = self._in_flight == 1
        if changed:
            self._changed()

    def leave(self) -> None:
        """A delivery counted by :meth:`enter` was answered."""
        with self._count:
            self._in_flight -= 1
            changed = self._in_flight == 0
        if changed:
            self._changed()

    def _changed(self) -> None:
        loop = self._loop
        if loop is None or _on(loop):
            self._settle()
        else:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
                loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        """On the gate's loop: the event follows the count as it is now (changes may have crossed)."""
        if self._in_flight:
            self._quiet.clear()
        else:
            self._quiet.set()

    async def quiet(self, patience: float) -> bool:
        """Wait until no delivery is in flight (True) or ``patience`` seconds passed (False)."""
        if not self.busy:
            return True
        try:
            async with asyncio.timeout(patience):
                while self.busy:
                    self._quiet.clear()  # a later answer sets it again (``_settle``)
                    await self._quiet.wait()
        except TimeoutError:
            return False
        return True


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is the loop running in this thread."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
