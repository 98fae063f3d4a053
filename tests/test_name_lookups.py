"""Name look-ups a message can trigger are bounded: per message, per read, at once, after a failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from channel.contract import Origin
from channel.slack import lookups
from channel.slack.adapter import SlackAdapter
from tests.support.sessions import identity_of
from tests.support.waiting import eventually
from threadbound_emulator import Call, FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.add_channel("C1", "general")
        fake.add_user("U1", "alice", display_name="Alice")
        yield fake


@pytest.fixture
async def adapter(slack: FakeSlack) -> AsyncIterator[SlackAdapter]:
    made = SlackAdapter(
        token=slack.token,
        api_url=slack.api_url,
        identity=identity_of(slack),
        file_origins=[slack.files_origin],
    )
    try:
        yield made
    finally:
        await made.close()


def _fake_mentions(count: int, prefix: str = "UFAKE") -> str:
    return " ".join(f"<@{prefix}{n:05d}>" for n in range(count))


async def test_a_thousand_fake_mentions_cost_at_most_the_per_message_limit(
    slack: FakeSlack, adapter: SlackAdapter
) -> None:
    """One message mentioning 1,000 made-up users makes at most LOOKUPS_PER_MESSAGE users.info
    calls (plus its author's), and still reads: the rest show as "@someone"."""
    text = "I'm the approver: " + _fake_mentions(1000)
    view = await adapter.view({"channel": "C1", "ts": "1.000001", "user": "U1", "text": text})
    assert view.author.display_name == "Alice"
    assert slack.count("users.info") <= lookups.LOOKUPS_PER_MESSAGE + 1
    assert "@someone" in view.text


async def test_a_read_of_many_such_messages_is_bounded_in_all(
    slack: FakeSlack, adapter: SlackAdapter
) -> None:
    """Forty messages of fifty fake mentions each cost at most LOOKUPS_PER_READ look-ups together."""
    root = slack.add_message("C1", "root", user="U1")
    for n in range(40):
        slack.add_message("C1", _fake_mentions(50, prefix=f"U{n:02d}X"), user="U1", thread_ts=root)
    views = await adapter.read(Origin("C1", root))
    assert len(views) == 41
    assert slack.count("users.info") <= lookups.LOOKUPS_PER_READ + 1


async def test_a_failed_lookup_is_remembered_briefly(slack: FakeSlack, adapter: SlackAdapter) -> None:
    """An unknown user is asked about once; reading the message again makes no second call."""
    message = {"channel": "C1", "ts": "1.000001", "user": "U1", "text": "hi <@UNOBODY>"}
    first = await adapter.view(message)
    calls = slack.count("users.info")
    second = await adapter.view(message)
    assert first.text == second.text == "hi @someone"
    assert slack.count("users.info") == calls


async def test_lookups_in_flight_at_once_are_bounded(slack: FakeSlack, adapter: SlackAdapter) -> None:
    """Twelve new people mentioned at once never have more than LOOKUP_CONCURRENCY users.info
    calls in flight."""
    for n in range(12):
        slack.add_user(f"UREAL{n:02d}", f"person{n}", display_name=f"Person {n}")
    in_flight, peak = 0, 0

    def arrived(call: Call) -> None:
        nonlocal in_flight, peak
        if call.method == "users.info":
            in_flight += 1
            peak = max(peak, in_flight)

    def handled(call: Call) -> None:
        nonlocal in_flight
        if call.method == "users.info":
            in_flight -= 1

    slack.observe(arrived)
    slack.on_handled(handled)
    slack.hold("users.info")
    text = " ".join(f"<@UREAL{n:02d}>" for n in range(12))
    reading = asyncio.create_task(
        adapter.view({"channel": "C1", "ts": "1.000001", "user": "U1", "text": text})
    )
    await eventually(lambda: slack.count("users.info") >= lookups.LOOKUP_CONCURRENCY)
    await asyncio.sleep(0.2)  # room for any call beyond the limit to arrive while these are held
    slack.release("users.info")
    view = await reading
    assert "@Person 11" in view.text
    assert peak <= lookups.LOOKUP_CONCURRENCY
