"""The ack path's right of way: run start-ups wait for a moment without deliveries in flight.

Every request on ``/slack/events`` is counted from its arrival until its answer is written
(:meth:`AckGate.acking`). The scheduler starts agent runs — lease, inbox, prompt rendering,
progress, the first model request — only when :meth:`AckGate.quiet` says no delivery is
waiting for its 200, or after ``patience`` seconds at most, so a burst of new conversations
is acknowledged first and answered right after, instead of slowing every acknowledgement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class AckGate:
    def __init__(self) -> None:
        self._in_flight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    @property
    def busy(self) -> bool:
        """A delivery is waiting for its acknowledgement."""
        return self._in_flight > 0

    @contextlib.contextmanager
    def acking(self) -> Iterator[None]:
        """Count one delivery from arrival to answer."""
        self._in_flight += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._quiet.set()

    async def quiet(self, patience: float) -> bool:
        """Wait until no delivery is in flight (True) or ``patience`` seconds passed (False)."""
        if not self.busy:
            return True
        try:
            async with asyncio.timeout(patience):
                await self._quiet.wait()
        except TimeoutError:
            return False
        return True
