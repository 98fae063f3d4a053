"""files.info look-ups are bounded per message and in flight, and a failed one is remembered for a
while: a share naming thousands of files costs Slack a handful of calls, not thousands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from channel.slack.file_access import MAX_CONCURRENT_LOOKUPS, MAX_LOOKUPS_PER_MESSAGE, MAX_LOOKUPS_PER_READ
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.sessions import SessionEnv, slack_session
from threadbound_emulator import FakeSlack
from threadbound_emulator.server import Call

NAMED = 2000


class InFlight:
    """The most ``files.info`` calls the emulator was handling at once."""

    def __init__(self, slack: FakeSlack) -> None:
        self.now = self.peak = 0
        slack.observe(self._start)
        slack.on_handled(self._end)

    def _start(self, call: Call) -> None:
        if call.method == "files.info":
            self.now += 1
            self.peak = max(self.peak, self.now)

    def _end(self, call: Call) -> None:
        if call.method == "files.info":
            self.now -= 1


def share_naming(count: int, first: int = 0) -> list[dict[str, Any]]:
    """A forwarded-message attachment naming ``count`` files of another conversation (IDs from ``first``)."""
    files = [{"id": f"F{n:09d}", "name": f"leak-{n}.txt"} for n in range(first, first + count)]
    return [{"is_share": True, "author_name": "Kim", "channel_id": "C2", "text": "fwd", "files": files}]


async def test_a_share_naming_2000_files_costs_a_bounded_number_of_look_ups(tmp_path: Path) -> None:
    """A mention whose forwarded attachment names 2,000 files makes at most MAX_LOOKUPS_PER_MESSAGE
    files.info calls, at most MAX_CONCURRENT_LOOKUPS at once; the model reads the rest as not
    looked up."""
    rows: list[dict[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        if turn.step == 0:
            return [call("channel_read")]
        if turn.step == 1:
            [(_, read)] = turn.results
            rows.extend(read["messages"])
            return [call("channel_reply", text="checked")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "finance")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.delay("files.info", 0.01, times=None)  # calls overlap, so the bound on them shows
        in_flight = InFlight(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path / "data") as app:
            text = "<@UBOT> what did Kim forward?"
            ts = slack.add_message("C1", text, user="U1")
            message = slack.find("C1", ts)
            assert message is not None
            message["attachments"] = share_naming(NAMED)
            envelope = events.app_mention("C1", "U1", text, ts)
            envelope["event"]["attachments"] = share_naming(NAMED)
            await app.deliver(envelope)
            await app.idle()
        assert [m["text"] for m in slack.bot_messages("C1")] == ["checked"]
        calls = slack.count("files.info")
    assert 0 < calls <= 2 * MAX_LOOKUPS_PER_MESSAGE  # the event's rows and the thread's, at most
    assert in_flight.peak <= MAX_CONCURRENT_LOOKUPS
    [files] = [r["files"] for r in rows if len(r.get("files") or []) == NAMED]
    assert not any("file" in f for f in files)  # no handle for any of them
    unchecked = [f for f in files if "too many files" in f["unavailable"]]
    assert len(unchecked) == NAMED - MAX_LOOKUPS_PER_MESSAGE


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SessionEnv]:
    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_channel("C1", "general")
        root = slack.add_message("C1", "<@UBOT> look", "U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            yield env


async def test_a_failed_look_up_is_not_tried_again_at_once(env: SessionEnv) -> None:
    """files.info failing for a forwarded file: reading the thread again (a later run's session)
    does not call it again while the failure is remembered, and the file stays without a handle."""
    ts = env.slack.add_message("C1", "fwd", "U1", thread_ts=env.root)
    message = env.slack.find("C1", ts)
    assert message is not None
    message["attachments"] = share_naming(1)
    env.slack.fail("files.info", status=200, error="internal_error", times=None)
    first = (await env.session.call("channel_read", {}))["messages"][-1]
    tried = env.slack.count("files.info")
    again = (await env.new_session().call("channel_read", {}))["messages"][-1]
    assert tried >= 1 and env.slack.count("files.info") == tried
    assert [set(f) for f in first["files"]] == [{"name", "unavailable"}] == [set(f) for f in again["files"]]


async def test_one_read_of_many_sharing_messages_costs_a_bounded_number_of_look_ups(env: SessionEnv) -> None:
    """Five forwarded messages naming 20 files each: one channel_read makes MAX_LOOKUPS_PER_READ
    files.info calls, for the newest messages' files; the oldest are listed as not looked up."""
    for n in range(5):
        ts = env.slack.add_message("C1", f"fwd {n}", "U1", thread_ts=env.root)
        message = env.slack.find("C1", ts)
        assert message is not None
        message["attachments"] = share_naming(MAX_LOOKUPS_PER_MESSAGE, first=n * 100)
    rows = (await env.session.call("channel_read", {}))["messages"]
    assert env.slack.count("files.info") == MAX_LOOKUPS_PER_READ
    files = [f for row in rows for f in row.get("files") or []]
    assert len(files) == 5 * MAX_LOOKUPS_PER_MESSAGE
    unchecked = [f for f in files if "too many files" in f["unavailable"]]
    assert len(unchecked) == 5 * MAX_LOOKUPS_PER_MESSAGE - MAX_LOOKUPS_PER_READ
    newest = rows[-1]["files"]
    assert not any("too many files" in f["unavailable"] for f in newest)
