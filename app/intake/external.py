"""The one-time private note to a person from another organisation, whose messages are ignored.

With ``ALLOW_EXTERNAL_USERS`` off (the default), a message from someone outside the install's
organisation (Slack Connect) starts nothing (the router decides, the delivery log says why). So
that they are not left wondering, such a person is told once, privately (``chat.postEphemeral``)
where they wrote. "Once" is per person and per process: a restart may tell them once more. The
note goes out in the background, so the delivery's 200 never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from channel.errors import ChannelError

from .router import Decision

log = logging.getLogger(__name__)

__all__ = ["NOTE", "ExternalNotice"]

NOTE = (
    "This app only answers people in its own organisation, so your message was not sent to it. "
    "Ask someone from the channel's organisation to help."
)
#: People told in one process before the oldest are forgotten (a bound on memory).
_REMEMBERED = 10_000


class PrivateTeller(Protocol):
    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None: ...


class ExternalNotice:
    """Tells each external person once (see the module doc)."""

    def __init__(self, adapter: PrivateTeller) -> None:
        self.adapter = adapter
        self._told: dict[str, None] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def __call__(self, decision: Decision) -> None:
        if not decision.external or not decision.user or decision.user in self._told:
            return
        self._told[decision.user] = None
        if len(self._told) > _REMEMBERED:
            del self._told[next(iter(self._told))]
        task = asyncio.create_task(self._tell(decision), name=f"external-note:{decision.user}")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _tell(self, decision: Decision) -> None:
        thread = decision.thread_ts if decision.thread_ts != decision.ts else ""
        try:
            await self.adapter.tell_privately(decision.channel, decision.user, NOTE, thread_ts=thread)
        except ChannelError as exc:
            log.warning("could not tell an external person why they get no answer: %s", exc.message)

    async def idle(self) -> None:
        """Wait for notes in flight (tests, shutdown)."""
        await asyncio.gather(*list(self._sending), return_exceptions=True)
