"""Slack's side of event delivery, with its faults: retried, duplicated, late, to any instance.

Slack POSTs an event to the app's request URL and, when no 200 comes back within 3 s (a refused
connection, a 5xx, a timeout), delivers it again (``X-Slack-Retry-Num`` 1, 2, 3: at once, after a
minute, after five; here after :data:`RETRY_DELAYS`, shorter), possibly to another instance behind
the load balancer. :class:`Deliverer` does the same for the tests that run several
server processes; a *duplicate* delivers an event once more after it was acknowledged (a retry that
crossed the 200), a *late* one waits before its first attempt (an event that sat in Slack's queue).
Clicks (``block_actions``) go the same way, form-encoded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from . import events
from .harness import SIGNING_SECRET

#: Seconds before each of Slack's three retries (Slack's own are about 0, 60 and 300).
RETRY_DELAYS = (1.0, 8.0, 25.0)
#: Seconds Slack waits for the app's 200.
ACK_WITHIN = 3.0


@dataclass
class Delivery:
    """One event or click as delivered: each attempt's instance URL and outcome."""

    body: dict[str, Any]
    attempts: list[tuple[str, str]] = field(default_factory=list)
    acked: bool = False


class Deliverer:
    """Delivers to whichever instance ``urls()`` offers (a callable: instances come and go)."""

    def __init__(
        self, http: aiohttp.ClientSession, urls: Callable[[], list[str]], pick: Callable[[int], int]
    ):
        self.http = http
        self.urls = urls
        #: ``pick(n)``: which of ``n`` instances takes the next attempt (a seeded choice).
        self.pick = pick
        self.deliveries: list[Delivery] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def send(
        self, body: dict[str, Any], *, late: float = 0.0, duplicate_after: float | None = None
    ) -> Delivery:
        """Deliver ``body`` in the background: after ``late`` s, retried as Slack retries; and once
        more ``duplicate_after`` s after it was acknowledged, when given."""
        delivery = Delivery(body)
        self.deliveries.append(delivery)
        task = asyncio.get_running_loop().create_task(self._deliver(delivery, late, duplicate_after))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return delivery

    async def settle(self) -> None:
        """Wait until every delivery has ended (acknowledged, or out of retries)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cancel(self) -> None:
        """Stop every delivery still under way."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _deliver(self, delivery: Delivery, late: float, duplicate_after: float | None) -> None:
        if late:
            await asyncio.sleep(late)
        for attempt, wait in enumerate((*RETRY_DELAYS, None)):
            if await self._attempt(delivery, attempt or None):
                delivery.acked = True
                break
            if wait is not None:
                await asyncio.sleep(wait)
        if delivery.acked and duplicate_after is not None:
            await asyncio.sleep(duplicate_after)
            await self._attempt(delivery, 1)

    async def _attempt(self, delivery: Delivery, retry_num: int | None) -> bool:
        urls = self.urls()
        if not urls:
            delivery.attempts.append(("", "no instance"))
            return False
        url = urls[self.pick(len(urls)) % len(urls)]
        outcome = "error"
        try:
            async with asyncio.timeout(ACK_WITHIN):
                if delivery.body.get("type") == "block_actions":
                    response = await events.deliver_interaction(
                        self.http, f"{url}/slack/events", delivery.body, SIGNING_SECRET
                    )
                else:
                    response = await events.deliver(
                        self.http, f"{url}/slack/events", delivery.body, SIGNING_SECRET, retry_num=retry_num
                    )
                outcome = str(response.status)
        except TimeoutError:
            outcome = "timeout"
        except (aiohttp.ClientError, OSError) as exc:
            outcome = type(exc).__name__
        delivery.attempts.append((url, outcome))
        return outcome == "200"
