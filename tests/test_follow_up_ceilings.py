"""Nothing runs away: follow-ups that no person's message started have a ceiling, one person cannot
take every slot, and a follow-up re-checks its person as Slack sees them when it fires."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.runs.follow_ups import FollowUpSweep, unattended_chain
from channel import follow_ups as fu
from channel import inbound
from storage import FollowUpRecord, InboxItem
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack


class Chain:
    """Schedules a follow-up when asked to remind, and schedules the next one whenever one fires."""

    def __init__(self) -> None:
        self.fired = 0
        self.results: list[dict[str, Any]] = []

    def __call__(self, turn: Turn) -> list[Any]:
        if "Follow-up you scheduled" in turn.prompt:
            self.fired += 1
            return [call("channel_follow_up", after="20m", note=f"check again ({self.fired})")]
        if "remind" in turn.prompt:
            return [call("tool_search", query="remind me later, follow up", limit=3)]
        for name, result in turn.results:
            if name == "tool_search":
                return [call("channel_follow_up", after="20m", note="check the deploy")]
            if name == "channel_follow_up":
                self.results.append(result)
                return [call("channel_reply", text=f"follow-up: {result.get('error', {}).get('code', 'ok')}")]
        return [""]


def _sweep(app: AppHarness) -> FollowUpSweep:
    assert app.service is not None and app.service.follow_ups is not None
    return app.service.follow_ups


async def _pending(app: AppHarness) -> list[FollowUpRecord]:
    assert app.service is not None
    return await app.service.store.pending_follow_ups()


async def _say(app: AppHarness, slack: FakeSlack, text: str, user: str = "U1", thread: str = "") -> str:
    ts = slack.add_message("C1", text, user=user, thread_ts=thread or None)
    delivered = await app.deliver(events.app_mention("C1", user, text, ts, thread_ts=thread or None))
    assert delivered.status == 200
    await app.idle()
    return thread or ts


async def _fire_all(app: AppHarness, rounds: int) -> int:
    """Fire whatever is pending, ``rounds`` times (each later than the last); how many fired."""
    fired = 0
    for _ in range(rounds):
        pending = await _pending(app)
        if not pending:
            break
        fired += len(await _sweep(app).fire(now=max(p.due_at for p in pending) + 1))
        await app.idle()
    return fired


async def test_a_chain_of_follow_ups_stops_at_the_ceiling_until_a_person_writes(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """The review's finding: a run started by a follow-up scheduled the next one, forever (5 of 5
    fired with nobody writing). Now a run no person started schedules at most
    FOLLOW_UPS_UNATTENDED_MAX (1) in a row: the second fired run reads ``denied``, and nothing is
    left pending; a person's next message in the thread lets it schedule again."""
    agent = Chain()
    async with AppHarness(slack, model=scripted(agent), data_dir=tmp_path) as app:
        root = await _say(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        assert len(await _pending(app)) == 1
        assert await _fire_all(app, 5) == 2
        assert await _pending(app) == []
        codes = [r.get("error", {}).get("code", "ok") for r in agent.results]
        assert codes == ["ok", "ok", "denied"]
        assert "FOLLOW_UPS_UNATTENDED_MAX=1" in agent.results[-1]["error"]["message"]
        await _say(app, slack, "<@UBOT> remind me again please", thread=root)
        assert len(await _pending(app)) == 1
        assert [r.get("error", {}).get("code", "ok") for r in agent.results][-1] == "ok"


async def test_with_a_ceiling_of_zero_a_fired_follow_up_schedules_nothing(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """``FOLLOW_UPS_UNATTENDED_MAX=0``: only a person's message can lead to a follow-up."""
    agent = Chain()
    async with AppHarness(
        slack, model=scripted(agent), data_dir=tmp_path, follow_ups_unattended_max=0
    ) as app:
        await _say(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        assert await _fire_all(app, 5) == 1
    assert [r.get("error", {}).get("code", "ok") for r in agent.results] == ["ok", "denied"]


async def test_one_person_cannot_take_every_follow_up_slot(slack: FakeSlack, tmp_path: Path) -> None:
    """With FOLLOW_UPS_PER_PERSON_MAX=2, Alice's third pending follow-up (in a third thread) is
    refused naming the setting, while Bob can still schedule his."""
    agent = Chain()
    async with AppHarness(
        slack, model=scripted(agent), data_dir=tmp_path, follow_ups_per_person_max=2
    ) as app:
        for _ in range(3):
            await _say(app, slack, "<@UBOT> remind me to check the deploy")
        await _say(app, slack, "<@UBOT> remind me to check the deploy", user="U2")
        pending = await _pending(app)
    assert sorted(p.requester for p in pending) == ["U1", "U1", "U2"]
    refused = [r for r in agent.results if "error" in r]
    assert len(refused) == 1 and refused[0]["error"]["code"] == "invalid_arguments"
    assert "FOLLOW_UPS_PER_PERSON_MAX" in refused[0]["error"]["message"]


def _deactivate(slack: FakeSlack) -> None:
    slack.users["U1"].deleted = True


def _make_guest(slack: FakeSlack) -> None:
    slack.users["U1"].is_restricted = True


def _move_abroad(slack: FakeSlack) -> None:
    slack.users["U1"].team_id = "T_OTHER_ORG"


def _leave(slack: FakeSlack) -> None:
    slack.channels["C1"].members = ["UBOT", "U2"]


@pytest.mark.parametrize(
    ("change", "note"),
    [
        (_deactivate, "no longer has an active account"),
        (_make_guest, "is a guest"),
        (_move_abroad, "from another organisation"),
        (_leave, "no longer in this conversation"),
    ],
)
async def test_a_follow_up_rechecks_its_person_as_slack_sees_them_when_it_fires(
    slack: FakeSlack, tmp_path: Path, change: Any, note: str
) -> None:
    """Scheduled by Alice; by the time it fires she is deactivated, a guest, from another
    organisation (ALLOW_EXTERNAL_USERS off) or gone from the channel: a short note in the thread, no
    model call."""
    agent = Chain()
    async with AppHarness(slack, model=scripted(agent), data_dir=tmp_path) as app:
        await _say(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        change(slack)
        assert await _fire_all(app, 1) == 1
        assert await _pending(app) == []
    assert agent.fired == 0
    notes = [m["text"] for m in slack.bot_messages("C1") if "did not run" in m.get("text", "")]
    assert len(notes) == 1 and note in notes[0]


async def test_a_follow_up_whose_person_still_passes_runs(slack: FakeSlack, tmp_path: Path) -> None:
    """Nothing changed about Alice: the follow-up fires and reaches the model as usual."""
    agent = Chain()
    async with AppHarness(slack, model=scripted(agent), data_dir=tmp_path) as app:
        await _say(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        assert await _fire_all(app, 1) == 1
    assert agent.fired == 1
    assert not [m for m in slack.bot_messages("C1") if "did not run" in m.get("text", "")]


def test_only_what_a_person_did_lifts_the_ceiling() -> None:
    """A person's message, a click and an answer start the count again; a fired follow-up carries
    its place in the chain; an expiry or another bot's message does not count as a person."""

    def item(payload: str) -> InboxItem:
        return InboxItem(1, "t1", "C1", "1.0", "", payload, 0.0)

    person = inbound.dump(inbound.InboundMessage(author=inbound.InboundAuthor(id="U1"), text="hi"))
    bot = inbound.dump(inbound.InboundMessage(author=inbound.InboundAuthor(bot="B1"), text="hi"))
    fired = FollowUpRecord("fu_aaaaaaaa1", "t1", "U1", "C1", "", "n", 0.0, 0.0)
    clicked = '{"kind": "approval_decision", "approval_id": "apv_1", "by": "U2"}'
    expired = '{"kind": "approval_decision", "approval_id": "apv_1", "by": ""}'
    assert unattended_chain([item(person)], 1) is None and unattended_chain([], 1) is None
    assert unattended_chain([item(clicked)], 1) is None
    assert unattended_chain([item(fu.payload(fired, 1)), item(fu.payload(fired))], 3) == 1
    assert unattended_chain([item(expired)], 3) == 3
    assert unattended_chain([item(bot)], 3) == 3


async def test_a_person_writing_into_a_running_follow_up_lifts_the_ceiling(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """With ``FOLLOW_UPS_UNATTENDED_MAX=0`` a fired follow-up's run may schedule nothing, until Bob
    writes in the thread while it runs: his message is steered into it, and then it may."""
    held, proceed = asyncio.Event(), asyncio.Event()
    results: list[dict[str, Any]] = []

    async def script(turn: Turn) -> list[Any]:
        results.extend(r for name, r in turn.results if name == "channel_follow_up")
        if "remind" in turn.prompt:
            return [call("tool_search", query="remind me later, follow up", limit=3)]
        if "Follow-up you scheduled" in turn.prompt:
            held.set()
            await proceed.wait()
            return [call("channel_follow_up", after="20m", note="before Bob")]
        if "still around" in turn.prompt:
            return [call("channel_follow_up", after="30m", note="after Bob")]
        if any(name == "tool_search" for name, _ in turn.results):
            return [call("channel_follow_up", after="20m", note="check the deploy")]
        return [""]

    async with AppHarness(
        slack, model=scripted(script), data_dir=tmp_path, follow_ups_unattended_max=0, stream="off"
    ) as app:
        root = await _say(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
        assert len(await _sweep(app).fire(now=scheduled.due_at + 1)) == 1
        await held.wait()
        ts = slack.add_message("C1", "are you still around?", user="U2", thread_ts=root)
        await app.deliver(events.message("C1", "U2", "are you still around?", ts, thread_ts=root))
        proceed.set()
        await app.idle()
        pending = await _pending(app)
    codes = [r.get("error", {}).get("code", "ok") for r in results]
    assert codes == ["ok", "denied", "ok"]
    assert [p.note for p in pending] == ["after Bob"]


async def test_a_follow_up_whose_person_the_profile_no_longer_admits_posts_a_note(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#general's profile serves @oncall; Alice schedules a follow-up, then leaves the group: when it
    fires it posts a short note instead of running (Scoped by profile, Nothing runs away)."""
    from channel.slack import directory

    monkeypatch.setattr(directory, "ACCESS_TTL", 0.001)  # the group as Slack has it now, not cached
    slack.scopes.append("usergroups:read")
    slack.add_usergroup("S1", "oncall", ["U1"])
    agent_file = tmp_path / "agent.toml"
    agent_file.write_text('[profiles.ops]\nchannels = ["C1"]\nusers = ["@oncall"]\n', encoding="utf-8")
    agent = Chain()
    async with AppHarness(
        slack, model=scripted(agent), data_dir=tmp_path / "data", agent_file=agent_file
    ) as app:
        await _say(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        slack.usergroups["S1"].users = ["U2"]
        assert await _fire_all(app, 1) == 1
    assert agent.fired == 0
    notes = [m["text"] for m in slack.bot_messages("C1") if "did not run" in m.get("text", "")]
    assert len(notes) == 1, slack.bot_messages("C1")
