"""``USER_MAX_RUNS``: how many conversations one person's messages may have running at once.

Without it one person could hold every run slot (``MAX_CONCURRENT_RUNS``) and everyone else would
wait. A conversation is charged to the author of its oldest pending message; past the limit its
driver gives its run slot back and waits here, before it takes the conversation's lease, so the
waiting conversation holds nothing and its messages stay in the durable inbox: queued, never
dropped.
The limit holds per instance (N instances allow up to N × ``USER_MAX_RUNS``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from channel import inbound
from storage.base import InboxItem

__all__ = ["PersonSlots", "first_author"]


def first_author(items: Sequence[InboxItem]) -> str:
    """The author of the oldest pending message; ``""`` when none is a person's message."""
    for item in items:
        if user := inbound.person(item.payload):
            return user
    return ""


class PersonSlots:
    """At most ``limit`` holders per person at once; ``""`` (nobody in particular) is not limited."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def full(self, person: str) -> bool:
        """Whether ``person`` already holds ``limit`` slots (a new holder would wait)."""
        found = self._slots.get(person)
        return found is not None and found[0].locked()

    @contextlib.asynccontextmanager
    async def hold(self, person: str) -> AsyncIterator[None]:
        if not person:
            yield
            return
        slot, users = self._slots.get(person, (asyncio.Semaphore(self.limit), 0))
        self._slots[person] = (slot, users + 1)
        try:
            async with slot:
                yield
        finally:
            slot, users = self._slots[person]
            if users <= 1:
                del self._slots[person]
            else:
                self._slots[person] = (slot, users - 1)
