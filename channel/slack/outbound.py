"""The one way out for every Slack write: paced per channel, rate limits waited out.

Slack lets an app post about one message per second into one channel (short
bursts allowed) and answers HTTP 429 with ``Retry-After`` beyond that, or when a
method's tier is exhausted. A 429 means nothing was done, so :meth:`Outbound.write`
makes the same call again once ``Retry-After`` has passed, as often as needed,
until ``deadline`` seconds after the write began; then it fails ``rate_limited``
("it was not done"). Before each attempt, the first included, it awaits the host's write
guard (``channel.contract.WRITE_GUARD``): a write held here for seconds or minutes, whose run
lost its lease meanwhile, is abandoned with the guard's exception and never reaches Slack
(invariant "Fast takeover, fenced writes", docs/architecture.md). Every other failure reaches
the caller after one attempt (invariant "Writes attempted once", docs/architecture.md): the
session's effect journal decides what a broken connection means.

Posts (``chat.postMessage``, file shares) into one channel leave in arrival
order, at most ``rate`` a second after a burst of ``burst`` (a GCRA leaky bucket),
so a burst of twenty replies is spread out instead of answered with 429s. The
spacing carries a small margin (``MARGIN_S``): posts sent exactly one second apart
can arrive a hair closer and be refused, and every refusal costs a whole second.
A 429 closes its lane (a channel's posts, or one method's other writes) for
everyone until ``Retry-After`` has passed, and a channel that answered 429 gets no
more bursts. Writes that post nothing (reactions, edits, status) are not paced.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from slack_sdk.errors import SlackApiError

from channel.contract import check_write_guard
from channel.errors import ChannelError
from storage.crashpoints import crash_point

from .errors import SlackCallObserver, slack_call

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a write may spend waiting for Slack's rate limits before it fails ``rate_limited``.
DEFAULT_DEADLINE = 300.0
#: Posts per second into one channel, and how many may leave at once after a quiet spell.
POST_RATE = 1.0
POST_BURST = 3
#: Seconds added to each post's spacing, so network jitter does not bring two posts under the limit.
MARGIN_S = 0.05
#: Wait after a 429 without a usable ``Retry-After`` (Slack always sends one; proxies may not).
DEFAULT_RETRY_AFTER = 1.0
#: Waits shorter than this are not worth a log line.
_LOG_WAIT_S = 0.05
#: Idle lanes are forgotten once there are this many (a lane is a few floats and a lock).
_MAX_IDLE_LANES = 1024


@dataclass(slots=True)
class _Lane:
    """Pacing state of one channel's posts (or one method's unpaced writes)."""

    #: GCRA's theoretical arrival time: when the next post would be due at exactly ``rate``.
    due: float = 0.0
    #: No call goes out before this (set from a 429's ``Retry-After``).
    closed_until: float = 0.0
    #: Slack refused a post here: no more bursts in this lane, one post per interval.
    strict: bool = False
    #: Hands out slots in arrival order.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Writes using the lane now (waiting or in flight): a lane in use is never forgotten, or a
    #: ``Retry-After`` its write is answered with would close a lane nobody looks at any more.
    users: int = 0


#: The crash-matrix point kind (``storage.crashpoints``) of each write to a conversation; the other
#: writes (statuses, titles, prompts, ephemeral notes, canvases) change no message of the answer.
CRASH_KINDS: dict[str, str] = {
    "chat.postMessage": "post",
    "chat.startStream": "startStream",
    "chat.appendStream": "appendStream",
    "chat.stopStream": "stopStream",
    "chat.update": "update",
    "chat.delete": "delete",
    "reactions.add": "reaction",
    "reactions.remove": "reaction",
    "files.upload_v2": "upload",
}


class Outbound:
    """Every write of one Slack install goes through one instance (see the module docstring)."""

    def __init__(
        self,
        *,
        deadline: float = DEFAULT_DEADLINE,
        rate: float = POST_RATE,
        burst: int = POST_BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        observer: SlackCallObserver | None = None,
    ) -> None:
        if deadline <= 0 or rate <= 0 or burst < 1:
            raise ValueError("deadline and rate must be positive and burst at least 1")
        self.deadline = deadline
        self._interval = 1.0 / rate + MARGIN_S
        # GCRA tolerance: how far ahead of schedule a post may go (burst - 1 intervals).
        self._tolerance = (burst - 1) * self._interval
        self._clock = clock
        self._sleep = sleep
        #: Told of every attempt (method, outcome, seconds), 429s included: the adapter's ``on_call``.
        self.observer = observer
        self._posts: dict[str, _Lane] = {}
        self._others: dict[str, _Lane] = {}

    async def write(
        self,
        method: str,
        call: Callable[[], Awaitable[T]],
        *,
        channel: str = "",
        post: bool = False,
        deadline: float | None = None,
    ) -> T:
        """Make ``call`` (one Slack write of ``method``) until it is not answered 429.

        ``post``: the write puts a message into ``channel`` and is paced with its other posts.
        ``deadline`` overrides the instance's for writes whose moment matters (a status line).
        Raises ``ChannelError``: Slack's own failure, or ``rate_limited`` when the deadline passed;
        or the write guard's own exception before an attempt (the module doc), the write unmade.
        """
        started = self._clock()
        give_up = started + (self.deadline if deadline is None else deadline)
        lane = self._lane(self._posts, channel) if post else self._lane(self._others, method)
        limited = 0
        lane.users += 1
        try:
            while True:
                await self._wait_turn(lane, method, started, give_up, paced=post, limited=limited)
                await check_write_guard()  # the host may have lost the right to write while it waited
                kind = CRASH_KINDS.get(method)
                try:
                    if kind:
                        crash_point(f"slack.{kind}.before")
                    async with slack_call(method, self.observer):
                        result = await call()
                    if kind:
                        crash_point(f"slack.{kind}.after")
                except ChannelError as exc:
                    wait = _retry_after(exc)
                    if wait is None:
                        raise
                    limited += 1
                    now = self._clock()
                    lane.closed_until = max(lane.closed_until, now + wait)
                    if post:
                        # Slots handed out before the refusal start again after it, one at a time.
                        lane.strict = True
                        lane.due = max(lane.due, lane.closed_until)
                    if now + wait > give_up:
                        raise self._gave_up(method, now - started, limited) from exc
                    continue
                waited = self._clock() - started
                if waited >= _LOG_WAIT_S or limited:
                    log.info(
                        "slack write waited %.1f s",
                        waited,
                        extra={"fields": _fields(method, channel, waited, limited)},
                    )
                return result
        finally:
            lane.users -= 1
            self._forget_idle()

    async def _wait_turn(
        self, lane: _Lane, method: str, started: float, give_up: float, *, paced: bool, limited: int
    ) -> None:
        """Sleep until ``lane`` is open and, for posts, until this post's slot; in arrival order."""
        async with lane.lock:
            while True:
                now = self._clock()
                ready = lane.closed_until
                if paced:
                    tolerance = 0.0 if lane.strict else self._tolerance
                    ready = max(ready, max(lane.due, now) - tolerance)
                if ready <= now:
                    break
                if ready > give_up:
                    raise self._gave_up(method, now - started, limited)
                # Re-checked after the sleep: a 429 meanwhile may have closed the lane for longer.
                await self._sleep(ready - now)
            if paced:
                lane.due = max(lane.due, now) + self._interval

    def _gave_up(self, method: str, waited: float, limited: int) -> ChannelError:
        log.warning(
            "slack write gave up on rate limits",
            extra={"fields": {"method": method, "waited_ms": round(waited * 1000), "rate_limited": limited}},
        )
        return ChannelError(
            "rate_limited",
            f"{method}: Slack kept rate limiting this, so it was not done; try again in a few minutes.",
            provider_code="ratelimited",
        )

    @staticmethod
    def _lane(lanes: dict[str, _Lane], key: str) -> _Lane:
        lane = lanes.get(key)
        if lane is None:
            lane = lanes[key] = _Lane()
        return lane

    def _forget_idle(self) -> None:
        now = self._clock()
        for lanes in (self._posts, self._others):
            if len(lanes) <= _MAX_IDLE_LANES:
                continue
            for key, lane in list(lanes.items()):
                if not lane.users and lane.due <= now and lane.closed_until <= now:
                    del lanes[key]


def _retry_after(exc: ChannelError) -> float | None:
    """Seconds Slack asked to wait, when ``exc`` is a rate-limit answer (nothing was done); else None."""
    if exc.provider_code != "ratelimited":
        return None
    cause = exc.__cause__
    if isinstance(cause, SlackApiError) and cause.response is not None:
        headers = {str(k).lower(): v for k, v in (cause.response.headers or {}).items()}
        raw = headers.get("retry-after")
        try:
            seconds = float(raw) if raw is not None else math.nan
        except (TypeError, ValueError):
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            # Zero would spin; Slack's own answers are whole seconds, at least one.
            return max(seconds, 0.01)
    return DEFAULT_RETRY_AFTER


def _fields(method: str, channel: str, waited: float, limited: int) -> dict[str, object]:
    fields: dict[str, object] = {"method": method, "waited_ms": round(waited * 1000), "rate_limited": limited}
    if channel:
        fields["channel"] = channel
    return fields
