"""The service loop's heartbeat, which ``/healthz`` reads from the HTTP edge.

The edge answers ``/healthz`` from a thread or a process of its own (``app.intake.edge_thread``,
``app.intake.edge_process``), so it would answer 200 while the loop that runs the conversations is
wedged (a blocking call, a stopped process) and a platform's liveness probe would never restart it.
The service loop therefore beats — writes the monotonic clock (one clock for every process of the
machine) into eight bytes of memory shared with the edge, made before the edge's process is
forked — every :data:`BEAT_INTERVAL` seconds, and the edge answers 503 once the last beat is older
than ``HEALTH_DEADLINE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import struct
import time

#: Seconds between two beats of the service loop.
BEAT_INTERVAL = 1.0
_CLOCK = struct.Struct("d")


class Heartbeat:
    """When the service loop last beat, in memory shared with a process forked after it was made."""

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, _CLOCK.size)  # anonymous and shared: a forked child sees the writes
        self._beating: asyncio.Task[None] | None = None
        self.beat()

    def beat(self) -> None:
        self._memory[: _CLOCK.size] = _CLOCK.pack(time.monotonic())

    def age(self) -> float:
        """Seconds since the last beat."""
        return time.monotonic() - float(_CLOCK.unpack(self._memory[: _CLOCK.size])[0])

    def start(self, interval: float = BEAT_INTERVAL) -> None:
        """Beat every ``interval`` seconds on the running loop (the service's) until :meth:`stop`."""
        if self._beating is None or self._beating.done():
            self._beating = asyncio.create_task(self._beat_every(interval), name="heartbeat")

    async def stop(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
            self._beating = None

    async def _beat_every(self, interval: float) -> None:
        while True:
            self.beat()
            await asyncio.sleep(interval)
