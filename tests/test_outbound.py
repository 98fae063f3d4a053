"""The outbound path's pacing and rate-limit waits, on a virtual clock (no real sleeping)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from channel.errors import ChannelError
from channel.slack.outbound import MARGIN_S, Outbound

#: One post's spacing at one post a second, margin included.
STEP = 1.0 + MARGIN_S


class VirtualTime:
    """A clock that only moves when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def _rate_limited(retry_after: str | None) -> SlackApiError:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    response = AsyncSlackResponse(
        client=None,  # type: ignore[arg-type]
        http_verb="POST",
        api_url="https://slack.test/api/chat.postMessage",
        req_args={},
        data={"ok": False, "error": "ratelimited"},
        headers=headers,
        status_code=429,
    )
    return SlackApiError("ratelimited", response)


def _outbound(vt: VirtualTime, **kwargs: Any) -> Outbound:
    return Outbound(clock=vt.clock, sleep=vt.sleep, **kwargs)


async def test_posts_into_one_channel_leave_at_the_rate_after_a_short_burst() -> None:
    """Posts into one channel go out in order: a burst of ``burst`` at once, then one per interval."""
    vt = VirtualTime()
    outbound = _outbound(vt, rate=1.0, burst=3)
    sent: list[tuple[int, float]] = []

    def post(n: int) -> Any:
        async def call() -> int:
            sent.append((n, vt.now))
            return n

        return call

    for n in range(6):
        assert await outbound.write("chat.postMessage", post(n), channel="C1", post=True) == n
    assert [n for n, _ in sent] == list(range(6))
    assert [t for _, t in sent] == pytest.approx([0.0, 0.0, 0.0, STEP, 2 * STEP, 3 * STEP])


async def test_channels_are_paced_apart_and_other_writes_are_not_paced() -> None:
    """A channel's backlog does not delay another channel's first post, nor a reaction in the same one."""
    vt = VirtualTime()
    outbound = _outbound(vt, rate=1.0, burst=1)

    async def ok() -> None:
        return None

    await outbound.write("chat.postMessage", ok, channel="C1", post=True)
    await outbound.write("chat.postMessage", ok, channel="C2", post=True)
    await outbound.write("reactions.add", ok, channel="C1")
    assert vt.sleeps == []
    await outbound.write("chat.postMessage", ok, channel="C1", post=True)
    assert vt.sleeps == pytest.approx([STEP])


async def test_a_429_is_waited_out_for_retry_after() -> None:
    """A 429 makes the write wait ``Retry-After`` and then make the same call again."""
    vt = VirtualTime()
    outbound = _outbound(vt, rate=10.0, burst=5)
    answers: list[BaseException | None] = [_rate_limited("7"), None]
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(vt.now)
        answer = answers.pop(0)
        if answer is not None:
            # What slack_call does with a SlackApiError: a ChannelError whose cause is the answer.
            raise ChannelError("rate_limited", "limited", provider_code="ratelimited") from answer
        return "posted"

    assert await outbound.write("chat.postMessage", flaky, channel="C1", post=True) == "posted"
    assert attempts == [0.0, 7.0]


class ManualTime:
    """A clock that moves only when the test calls :meth:`advance`; sleepers wake then."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self.asleep = asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, wake))
        self.asleep.set()
        await wake

    def advance(self, to: float) -> None:
        self.now = to
        for due, wake in list(self._sleepers):
            if due <= to and not wake.done():
                wake.set_result(None)


async def test_a_429_holds_back_the_channels_other_posts() -> None:
    """While one post waits out a 429, a later post into the same channel waits behind it (and
    then a full interval, no burst), and a post into another channel is not held back."""
    mt = ManualTime()
    outbound = Outbound(clock=mt.clock, sleep=mt.sleep)
    attempts: list[tuple[str, float]] = []

    async def limited_once() -> None:
        attempts.append(("first", mt.now))
        if len(attempts) == 1:
            raise ChannelError("rate_limited", "limited", provider_code="ratelimited") from _rate_limited(
                "60"
            )

    async def other(name: str) -> None:
        attempts.append((name, mt.now))

    first = asyncio.create_task(outbound.write("chat.postMessage", limited_once, channel="C1", post=True))
    await mt.asleep.wait()  # the first post got its 429 and waits
    later = asyncio.create_task(
        outbound.write("chat.postMessage", lambda: other("later"), channel="C1", post=True)
    )
    await asyncio.sleep(0)  # let it start and queue
    await outbound.write("chat.postMessage", lambda: other("C2"), channel="C2", post=True)
    mt.advance(60.0)
    await first
    mt.advance(70.0)
    await later
    assert attempts[:3] == [("first", 0.0), ("C2", 0.0), ("first", 60.0)]
    assert attempts[3][0] == "later" and attempts[3][1] >= 60.0 + STEP


async def test_the_deadline_ends_the_wait_with_rate_limited() -> None:
    """When the next try would come after the deadline, the write fails rate_limited without it."""
    vt = VirtualTime()
    outbound = _outbound(vt, deadline=20.0)
    attempts: list[float] = []

    async def always_limited() -> None:
        attempts.append(vt.now)
        raise ChannelError("rate_limited", "limited", provider_code="ratelimited") from _rate_limited("8")

    with pytest.raises(ChannelError) as failed:
        await outbound.write("chat.update", always_limited)
    assert failed.value.code == "rate_limited"
    assert attempts == [0.0, 8.0, 16.0]


async def test_other_failures_are_attempted_once() -> None:
    """A failure that is not a rate limit reaches the caller after one attempt (invariant 5)."""
    vt = VirtualTime()
    outbound = _outbound(vt)
    attempts = 0

    async def broken() -> None:
        nonlocal attempts
        attempts += 1
        raise ChannelError("slack_error", "transport", provider_code="transport")

    with pytest.raises(ChannelError):
        await outbound.write("chat.postMessage", broken, channel="C1", post=True)
    assert attempts == 1


async def test_a_missing_retry_after_waits_a_second() -> None:
    """A 429 without a usable Retry-After is retried after one second rather than at once."""
    vt = VirtualTime()
    outbound = _outbound(vt)
    answers: list[BaseException | None] = [_rate_limited(None), None]
    attempts: list[float] = []

    async def flaky() -> None:
        attempts.append(vt.now)
        answer = answers.pop(0)
        if answer is not None:
            raise ChannelError("rate_limited", "limited", provider_code="ratelimited") from answer

    await outbound.write("reactions.add", flaky)
    assert attempts == [0.0, 1.0]


async def test_a_lane_with_a_write_in_flight_is_not_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle lanes are forgotten, but not one whose write is in flight: its 429 still holds back the
    next write of that lane for ``Retry-After``."""
    from channel.slack import outbound as outbound_module

    monkeypatch.setattr(outbound_module, "_MAX_IDLE_LANES", 0)
    mt = ManualTime()
    outbound = Outbound(clock=mt.clock, sleep=mt.sleep)
    answered = asyncio.Event()
    attempts: list[tuple[str, float]] = []

    async def first() -> str:
        attempts.append(("first", mt.now))
        if len(attempts) == 1:
            await answered.wait()
            raise ChannelError("rate_limited", "limited", provider_code="ratelimited") from _rate_limited("7")
        return "first"

    async def second() -> str:
        attempts.append(("second", mt.now))
        return "second"

    async def other() -> str:
        return "other"

    in_flight = asyncio.create_task(outbound.write("reactions.add", first))
    await asyncio.sleep(0)
    assert await outbound.write("chat.update", other) == "other"  # forgets idle lanes
    answered.set()
    await mt.asleep.wait()  # the first write waits out its Retry-After
    later = asyncio.create_task(outbound.write("reactions.add", second))
    for _ in range(5):
        await asyncio.sleep(0)
    assert ("second", 0.0) not in attempts
    mt.advance(7.0)
    assert await in_flight == "first" and await later == "second"
    assert ("second", 7.0) in attempts
