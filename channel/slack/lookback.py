"""Looking at what Slack holds when a write's answer did not say whether it happened.

A dropped connection, a 5xx (often an HTML page from a proxy), ``internal_error``,
``fatal_error`` or ``request_timeout`` may come after Slack did the write. Such an
answer is never reported as a failure, nor the write repeated, before Slack's state was
looked at: :meth:`Lookback.once` makes the write and, on an ambiguous answer, asks a
check what Slack holds — done (the write's result), not done (the error, now definite),
or still unknown (the error, still ``ambiguous``, saying so).

A write that got no answer at all (a cut connection, a timeout) or a gateway's 5xx may still be
on its way: Slack can apply it seconds after the caller gave up on it. Until ``window`` seconds
after its attempt began (the attempt's timeout and a margin: :data:`IN_FLIGHT_S`) a look that finds
nothing is not an answer: Slack is looked at again, at growing intervals, and the write reported
not done only once that time has passed. An answer of Slack's own (``internal_error`` at HTTP 200)
ended the request: one look settles it.

A streamed message carries no effect id until it is stopped, so an unfinished one is
found by author and place: :meth:`Lookback.find_unfinished` lists the bot's replies in
a thread after a given message that carry no effect id and no file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from slack_sdk.errors import SlackApiError

from channel.contract import Origin, Posted, look_until
from channel.errors import ChannelError

from .link import SlackLink, effect_id_of, split_ref
from .reads import Reads
from .transport import TIMEOUT_S

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds Slack may take after the timeout of an attempt before a write it received shows.
IN_FLIGHT_MARGIN_S = 5.0
#: Seconds after its attempt began that a write whose answer was lost may still be applied.
IN_FLIGHT_S = TIMEOUT_S + IN_FLIGHT_MARGIN_S


def maybe_in_flight(exc: ChannelError) -> bool:
    """Whether the ambiguous ``exc`` may leave the write still on its way: no answer came (a cut
    connection, a timeout), or a gateway answered for Slack (HTTP 5xx)."""
    if exc.provider_code == "transport":
        return True
    cause = exc.__cause__
    response = cause.response if isinstance(cause, SlackApiError) else None
    return response is not None and response.status_code >= 500


class Lookback:
    """Ambiguous write answers settled by a look at Slack: writes through the ``link``'s outbound
    path, looks through ``reads``."""

    def __init__(self, link: SlackLink, reads: Reads, *, window: float = IN_FLIGHT_S) -> None:
        self.link = link
        self.reads = reads
        #: Seconds after its attempt began that a write whose answer was lost may still land.
        self.window = window

    async def once(
        self,
        method: str,
        call: Callable[[], Awaitable[T]],
        check: Callable[[], Awaitable[T | None]],
        *,
        channel: str = "",
        post: bool = False,
        deadline: float | None = None,
    ) -> T:
        """Make the write ``call`` once (through the outbound path); when its answer is ambiguous,
        ``check`` says what Slack holds: a result (it was done), None (it was not). A write that may
        still be on its way is looked at until it can no longer land (the module doc)."""
        began: list[float] = []

        async def attempt() -> T:
            began.append(time.monotonic())
            return await call()

        try:
            return await self.link.outbound.write(
                method, attempt, channel=channel, post=post, deadline=deadline
            )
        except ChannelError as exc:
            if not exc.ambiguous:
                raise
            until = began[-1] + self.window if began and maybe_in_flight(exc) else 0.0
            try:
                done = await look_until(check, until)
            except ChannelError as lookup:
                log.warning("%s: could not look whether it was done: %s", method, lookup.message)
                exc.message = f"{exc.message} It may have been done anyway: look before doing it again."
                raise exc from None
            if done is not None:
                log.info("%s: answered %s, but it was done", method, exc.provider_code)
                return done
            exc.ambiguous = False
            exc.message = f"{exc.message} (Slack was checked: it was not done.)"
            raise exc from None

    async def message(self, ref: str) -> dict[str, Any] | None:
        """The message ``ref`` as Slack holds it now (reactions and metadata included); None when
        it is gone."""
        channel, ts = split_ref(ref)
        try:
            thread = await self.reads.replies(Origin(channel, ts), metadata=True)
        except ChannelError as exc:
            if exc.code == "not_found":
                return None
            raise
        return next((m for m in thread if str(m.get("ts")) == ts), None)

    def by_us(self, message: dict[str, Any]) -> bool:
        user, bot = message.get("user"), message.get("bot_id")
        me = self.link.identity
        return user == me.user_id or (bool(bot) and bot == me.bot_id)

    async def find_unfinished(self, origin: Origin, after: str) -> list[Posted]:
        """The bot's replies in the origin's thread newer than ``after`` that carry no effect id and
        no file: streamed messages not stopped (``chat.startStream`` carries no metadata)."""
        return [self.link.posted(origin, str(m.get("ts"))) for m in await self.unfinished(origin, after)]

    async def unfinished(self, origin: Origin, after: str) -> list[dict[str, Any]]:
        """The messages :meth:`find_unfinished` names, as Slack holds them."""
        if not origin.thread:
            return []
        floor = _ts_key(after or origin.thread)
        return [
            m
            for m in await self.reads.replies(origin, metadata=True)
            if self.by_us(m)
            and str(m.get("ts")) != origin.thread
            and _ts_key(str(m.get("ts") or "")) > floor
            and not effect_id_of(m)
            and not m.get("files")
        ]


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    try:
        return int(seconds or 0), int(micros.ljust(6, "0")[:6] or 0)
    except ValueError:
        return (0, 0)


def shown_text(message: dict[str, Any]) -> str:
    """The Markdown a message shows (its ``markdown`` blocks, else its text)."""
    blocks = [str(b.get("text") or "") for b in message.get("blocks") or [] if b.get("type") == "markdown"]
    return "".join(blocks) if blocks else str(message.get("text") or "")
