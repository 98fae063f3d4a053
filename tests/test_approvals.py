"""Approvals in the thread: gated calls wait for a signed click by the right person, once."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from app.agent.approval_cards import APPROVE, DENY
from channel.card_fields import MAX_SECTION_CHARS, MAX_SECTIONS, ArgumentsUnshowable
from channel.slack.cards import arg_sections
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

_HANDLE = re.compile(r'"message": "(msg_[A-Za-z0-9_-]+)"')


def _agent_file(tmp_path: Path, globs: list[str]) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(f"approval = {json.dumps(globs)}\n", encoding="utf-8")
    return path


def _gated(
    slack: FakeSlack, tmp_path: Path, script: Any, globs: Sequence[str] = ("channel_react",), **harness: Any
) -> AppHarness:
    """The app on ``tmp_path`` driven by ``script``, its agent file gating ``globs``."""
    agent = _agent_file(tmp_path, list(globs))
    return AppHarness(slack, model=scripted(script), data_dir=tmp_path, agent_file=agent, **harness)


def _tickets_agent(tmp_path: Path, *, approval: str, eager: str) -> Path:
    """An agent file running the tickets MCP server (``eager`` offered at once), gating ``approval``."""
    python = sys.executable.replace("\\", "/")
    tickets = (Path(__file__).parent / "support" / "mcp_tickets.py").as_posix()
    agent = tmp_path / "agent.toml"
    agent.write_text(
        f'approval = ["{approval}"]\n'
        "[mcp.tickets]\n"
        f'command = ["{python}", "{tickets}"]\n'
        f'eager = ["{eager}"]\n'
        "timeout = 5\n",
        encoding="utf-8",
    )
    return agent


class ReactScript:
    """Asks to react to the person's message (gated); then replies with what the call returned."""

    def __init__(self, reactions: int = 1) -> None:
        self.reactions = reactions
        self.results: list[Any] = []

    def __call__(self, turn: Turn) -> list[Any]:
        if turn.prompt and "react" in turn.prompt:
            handle = _HANDLE.search(turn.prompt)
            assert handle is not None
            emojis = ["white_check_mark", "tada", "eyes"][: self.reactions]
            return [call("channel_react", message=handle.group(1), emoji=e) for e in emojis]
        reacted = [r for name, r in turn.results if name == "channel_react"]
        if reacted:
            self.results.append(reacted)
            codes = [r["error"]["code"] if "error" in r else "ok" for r in reacted]
            return [call("channel_reply", text="outcome: " + ", ".join(codes))]
        return [""]


def _cards(slack: FakeSlack) -> list[dict[str, Any]]:
    return [
        m for m in slack.bot_messages("C1") if any(b.get("type") == "actions" for b in m.get("blocks", []))
    ]


def _approval_id(card: dict[str, Any], action_id: str = APPROVE) -> str:
    actions = next(b for b in card["blocks"] if b["type"] == "actions")
    return str(next(e["value"] for e in actions["elements"] if e["action_id"] == action_id))


def _bot_reactions(slack: FakeSlack, ts: str) -> list[str]:
    message = next(m for m in slack.messages("C1") if m["ts"] == ts)
    return [r["name"] for r in message.get("reactions", []) if slack.bot_user_id in r["users"]]


def _click(card: dict[str, Any], user: str, action_id: str, root: str) -> dict[str, Any]:
    return events.block_actions(
        channel="C1",
        user=user,
        message_ts=card["ts"],
        thread_ts=root,
        action_id=action_id,
        value=_approval_id(card, action_id),
    )


async def _settle(app: AppHarness) -> None:
    assert app.service is not None and app.service.approvals is not None
    await app.idle()
    await app.service.approvals.idle()


async def _ask(app: AppHarness, slack: FakeSlack, text: str = "<@UBOT> please react") -> str:
    root = slack.add_message("C1", text, user="U1")
    assert (await app.deliver(events.app_mention("C1", "U1", text, root))).status == 200
    await _settle(app)
    return root


async def test_the_requester_approves_and_the_call_runs_once(slack: FakeSlack, tmp_path: Path) -> None:
    """A gated call posts a card instead of running; the requester's signed click runs it, the run
    continues with its result, and the card shows who decided and loses its buttons."""
    script = ReactScript()
    async with _gated(slack, tmp_path, script) as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        assert card["thread_ts"] == root
        text = json.dumps(card["blocks"])
        assert "channel_react" in text and "white_check_mark" in text and "<@U1>" in text
        assert _bot_reactions(slack, root) == []  # not run yet
        assert app.service is not None and not app.service.runner.executor.active_runs

        response = await app.click(_click(card, "U1", APPROVE, root))
        assert response.status == 200
        await _settle(app)
        # The same click again (a double click, a redelivery): nothing more happens.
        assert (await app.click(_click(card, "U1", APPROVE, root))).status == 200
        await _settle(app)
        # The resumed run's model use is the asker's, like the run that asked.
        usage = await app.service.store.usage_by_day(since="1970-01-01")
        assert {row.person for row in usage} == {"U1"}

    assert _bot_reactions(slack, root) == ["white_check_mark"]
    assert slack.count("reactions.add") == 1
    assert script.results == [[{"ok": True}]]
    replies = [
        m["text"] for m in slack.bot_messages("C1") if not m.get("blocks", [{}])[0].get("type") == "section"
    ]
    assert replies == ["outcome: ok"]
    [updated] = [m for m in slack.bot_messages("C1") if m["ts"] == card["ts"]]
    assert not any(b["type"] == "actions" for b in updated["blocks"])
    assert "Approved* by <@U1>" in json.dumps(updated["blocks"]) and "<!date^" in json.dumps(
        updated["blocks"]
    )
    assert slack.ephemerals == []


async def test_someone_else_is_refused_privately_and_nothing_changes(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """A click by a person who neither asked nor is in APPROVERS gets an ephemeral note; the call
    stays pending and the card keeps its buttons. A user in APPROVERS may decide."""
    script = ReactScript()
    async with _gated(slack, tmp_path, script, approvers=("U9",)) as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        assert (await app.click(_click(card, "U2", APPROVE, root))).status == 200
        await _settle(app)
        assert slack.ephemerals and slack.ephemerals[0][:3] == ("C1", "U2", root)
        assert "Only <@U1> or an approver" in slack.ephemerals[0][3]
        assert _bot_reactions(slack, root) == [] and len(_cards(slack)) == 1
        assert slack.count("chat.update") == 0 and script.results == []

        assert (await app.click(_click(card, "U9", APPROVE, root))).status == 200
        await _settle(app)
    assert _bot_reactions(slack, root) == ["white_check_mark"]
    assert "by <@U9>" in json.dumps(next(m for m in slack.bot_messages("C1") if m["ts"] == card["ts"]))


async def test_deny_tells_the_model_and_the_run_continues(slack: FakeSlack, tmp_path: Path) -> None:
    """Denied: the call never runs and the model reads {"error": {"code": "denied"}} and answers."""
    script = ReactScript()
    async with _gated(slack, tmp_path, script, ["channel_*"]) as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        assert (await app.click(_click(card, "U1", DENY, root))).status == 200
        await _settle(app)
    assert slack.count("reactions.add") == 0
    [[result]] = script.results
    assert result["error"]["code"] == "denied"
    # channel_reply is gated too (channel_*): the answer waits for its own card.
    assert len(_cards(slack)) == 1
    assert "Denied* by <@U1>" in json.dumps(
        next(m for m in slack.bot_messages("C1") if m["ts"] == card["ts"])
    )


async def test_an_unanswered_card_expires_and_a_late_click_cannot_approve(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Past APPROVAL_TTL the sweep decides 'expired' (the clock is moved, nothing sleeps): the model
    reads {"error": {"code": "expired"}}; a later click changes nothing."""
    script = ReactScript(reactions=2)
    async with _gated(slack, tmp_path, script, approval_ttl=600) as app:
        assert app.service is not None and app.service.approvals is not None
        root = await _ask(app, slack)
        first, second = _cards(slack)
        approvals = app.service.approvals
        approvals.clock = lambda: time.time() + 601
        # Checked on click: the late approval of the first card becomes 'expired'.
        assert (await app.click(_click(first, "U1", APPROVE, root))).status == 200
        await _settle(app)
        assert "expired" in slack.ephemerals[-1][3]
        assert script.results == []  # the second card is still open (its expiry is the sweep's)
        assert await app.service.runner.sweep() >= 1
        await _settle(app)
        assert (await app.click(_click(second, "U1", APPROVE, root))).status == 200
        await _settle(app)
    assert slack.count("reactions.add") == 0
    [results] = script.results
    assert [r["error"]["code"] for r in results] == ["expired", "expired"]
    assert "already expired" in slack.ephemerals[-1][3]
    assert all(
        "Expired" in json.dumps(m["blocks"])
        for m in slack.bot_messages("C1")
        if m["ts"] in (first["ts"], second["ts"])
    )


async def test_several_gated_calls_get_a_card_each_and_resume_after_the_last_decision(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Two gated calls in one step post two cards; the run resumes only once both are decided."""
    script = ReactScript(reactions=2)
    async with _gated(slack, tmp_path, script) as app:
        root = await _ask(app, slack)
        first, second = _cards(slack)
        assert _approval_id(first) != _approval_id(second)
        await app.click(_click(first, "U1", APPROVE, root))
        await _settle(app)
        assert script.results == [] and _bot_reactions(slack, root) == []
        # A message meanwhile waits with the task; it is shown with the resumed run.
        ts = slack.add_message("C1", "any news?", user="U1", thread_ts=root)
        await app.deliver(events.message("C1", "U1", "any news?", ts, thread_ts=root))
        await _settle(app)
        assert script.results == []
        await app.click(_click(second, "U1", DENY, root))
        await _settle(app)
    [results] = script.results
    assert [("error" in r) for r in results] == [False, True]
    assert _bot_reactions(slack, root) == ["white_check_mark"]


async def test_a_restart_between_card_and_click_loses_nothing(slack: FakeSlack, tmp_path: Path) -> None:
    """The card is posted by one process; after a restart on the same data dir the click resumes."""
    script = ReactScript()
    async with _gated(slack, tmp_path, script) as app:
        root = await _ask(app, slack)
    [card] = _cards(slack)
    async with _gated(slack, tmp_path, script) as app:
        assert (await app.click(_click(card, "U1", APPROVE, root))).status == 200
        await _settle(app)
    assert _bot_reactions(slack, root) == ["white_check_mark"]
    assert script.results == [[{"ok": True}]]
    assert len([m for m in slack.bot_messages("C1") if "blocks" in m and m["ts"] == card["ts"]]) == 1


async def test_a_card_whose_answer_was_lost_is_not_posted_twice(slack: FakeSlack, tmp_path: Path) -> None:
    """The card post is journalled: Slack applied it but the answer was lost; the open effect is
    settled by finding the card in the thread by its effect id (at once, by the driver that still
    sees the effect open), never by posting another, and the click still works."""
    script = ReactScript()
    slack.drop("chat.postMessage")  # the card: posted, answer lost
    async with _gated(slack, tmp_path, script) as app:
        assert app.service is not None
        root = await _ask(app, slack)
        [card] = _cards(slack)
        [pending] = await app.service.store.task_approvals(str(await app.service.store.find_task("C1", root)))
        assert pending.card_ts == card["ts"]  # found, not posted again
        assert await app.service.store.open_effects(pending.task_id) == []
        await app.service.runner.sweep()
        await _settle(app)
        assert len(_cards(slack)) == 1
        assert slack.count("chat.postMessage") == 1
        await app.click(_click(card, "U1", APPROVE, root))
        await _settle(app)
    assert _bot_reactions(slack, root) == ["white_check_mark"]
    assert "Approved" in json.dumps(next(m for m in slack.bot_messages("C1") if m["ts"] == card["ts"]))


async def test_approval_gates_a_channel_tool_such_as_channel_retract(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """`approval = ["channel_retract"]`: retracting the bot's own post waits for the card, then runs."""
    posted: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt and "retract" in turn.prompt:
            return [call("channel_reply", text="a post to take back")]
        for name, result in turn.results:
            if name == "channel_reply" and "message" in result and not posted:
                posted.append(result["message"])
                return [call("tool_search", query="retract delete message")]
            if name == "tool_search":
                return [call("channel_retract", message=posted[0])]
            if name == "channel_retract":
                return [call("channel_reply", text=f"retracted: {json.dumps(result)}")]
        return [""]

    async with _gated(slack, tmp_path, script, ["channel_retract"]) as app:
        root = await _ask(app, slack, "<@UBOT> post then retract")
        [card] = _cards(slack)
        assert "channel_retract" in json.dumps(card["blocks"])
        texts = [m["text"] for m in slack.bot_messages("C1")]
        assert "a post to take back" in texts
        await app.click(_click(card, "U1", APPROVE, root))
        await _settle(app)
    texts = [m["text"] for m in slack.bot_messages("C1")]
    assert "a post to take back" not in texts
    assert 'retracted: {"ok": true}' in texts


@pytest.mark.process
async def test_approval_gates_an_mcp_tool(slack: FakeSlack, tmp_path: Path) -> None:
    """`approval` globs match MCP tools too: the call to a real MCP server waits for its card and,
    once approved, its result reaches the model."""
    agent = _tickets_agent(tmp_path, approval="tickets_get_*", eager="get_ticket")
    seen: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt and "ticket" in turn.prompt:
            return [call("tickets_get_ticket", ticket_id=1)]
        for name, result in turn.results:
            if name == "tickets_get_ticket":
                seen.append(result)
                return [call("channel_reply", text="got it")]
        return [""]

    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path / "d", agent_file=agent) as app:
        root = await _ask(app, slack, "<@UBOT> read ticket 1")
        [card] = _cards(slack)
        assert "tickets_get_ticket" in json.dumps(card["blocks"]) and seen == []
        await app.click(_click(card, "U1", APPROVE, root))
        await _settle(app)
    assert len(seen) == 1 and "Login page times out" in json.dumps(seen[0])
    assert "got it" in [m["text"] for m in slack.bot_messages("C1")]


def test_card_arguments_are_whole_and_cannot_mention_or_break_out() -> None:
    """A long value is shown whole, in consecutive sections within Slack's section limit; fences and
    mention syntax are neutralised."""
    shown = arg_sections(json.dumps({"body": "x" * 5000 + "END"}))
    assert len(shown) == 2 and all(len(s) <= MAX_SECTION_CHARS for s in shown)
    assert "body (part 1 of 2): " in shown[0] and "body (part 2 of 2): " in shown[1]
    assert (
        "".join(shown).count("x") == 5000 and 'END"' in shown[1] and "more characters" not in "".join(shown)
    )
    [fenced] = arg_sections(json.dumps({"text": "```<!channel>```"}))
    assert "```" not in fenced[3:-3] and "<!channel>" not in fenced


def test_every_argument_key_is_shown_whatever_the_order_and_length() -> None:
    """A 1,700-character body before ``to`` does not hide ``to``; nested keys and list items are
    shown too, and a newline in a value cannot forge a line of its own."""
    args = {
        "body": "x" * 1700 + '\nto: "friend@example.com"',
        "to": "attacker@evil.example",
        "cc": {"list": ["a@example.com", "b" * 4000], "bcc": "spy@evil.example"},
    }
    text = "\n".join(arg_sections(json.dumps(args)))
    assert '\nto: "attacker@evil.example"' in text
    assert 'cc.list[0]: "a@example.com"' in text and "cc.list[1] (part 1 of " in text
    assert 'cc.bcc: "spy@evil.example"' in text and text.count("b") >= 4000
    assert '\nto: "friend' not in text and '\\nto: \\"friend@example.com\\""' in text


def test_many_long_values_are_shown_whole_and_too_many_cannot_be_shown() -> None:
    """Thirty values of 3,000 characters are all shown whole within the card's block limits; fifty
    such values, ten thousand keys, or one key longer than a section cannot be shown at all."""
    sections = arg_sections(json.dumps({f"k{i}": "v" * 3000 for i in range(30)}))
    assert len(sections) <= MAX_SECTIONS and all(len(s) <= MAX_SECTION_CHARS for s in sections)
    assert "".join(sections).count("v") == 30 * 3000
    assert all(f"k{i} (part 1 of 2): " in "".join(sections) for i in range(30))
    with pytest.raises(ArgumentsUnshowable):
        arg_sections(json.dumps({f"k{i}": "v" * 3000 for i in range(50)}))
    with pytest.raises(ArgumentsUnshowable):
        arg_sections(json.dumps({f"k{i}": i for i in range(10_000)}))
    with pytest.raises(ArgumentsUnshowable):
        arg_sections(json.dumps({"k" * 4000: 1}))


@pytest.mark.process
@pytest.mark.parametrize("keys", [1, 20_000])
async def test_a_card_shows_the_key_that_matters_or_the_call_is_denied(
    slack: FakeSlack, tmp_path: Path, keys: int
) -> None:
    """A gated MCP call with a long body before ``to`` gets a card showing ``to``; one whose arguments no
    card can show is denied at once (the model reads ``denied``), and no card is posted."""
    seen: list[Any] = []
    meta = {f"m{i}": "x" for i in range(keys)}

    def script(turn: Turn) -> list[Any]:
        if turn.prompt and "notify" in turn.prompt:
            return [call("tickets_notify", body="b" * 1700, to="attacker@evil.example", meta=meta)]
        for name, result in turn.results:
            if name == "tickets_notify":
                seen.append(result)
                return [call("channel_reply", text="done")]
        return [""]

    agent = _tickets_agent(tmp_path, approval="tickets_notify", eager="notify")
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path / "d", agent_file=agent) as app:
        await _ask(app, slack, "<@UBOT> notify them")
        cards = _cards(slack)
    if keys == 1:
        [card] = cards
        assert 'to: \\"attacker@evil.example\\"' in json.dumps(card["blocks"]) and seen == []
    else:
        assert cards == [] and seen[0]["error"]["code"] == "denied"
        assert "approval card" in seen[0]["error"]["message"]


async def test_approval_by_approvers_lets_only_approvers_decide(slack: FakeSlack, tmp_path: Path) -> None:
    """With APPROVAL_BY=approvers the requester's own click is refused privately; an approver decides."""
    script = ReactScript()
    async with _gated(slack, tmp_path, script, approvers=("U9",), approval_by="approvers") as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        assert (await app.click(_click(card, "U1", APPROVE, root))).status == 200
        await _settle(app)
        assert slack.ephemerals and "Only an approver can decide" in slack.ephemerals[0][3]
        assert _bot_reactions(slack, root) == [] and script.results == []
        assert (await app.click(_click(card, "U9", APPROVE, root))).status == 200
        await _settle(app)
    assert _bot_reactions(slack, root) == ["white_check_mark"]


async def test_the_same_click_on_two_instances_runs_the_call_once(
    slack: FakeSlack, tmp_path: Path, database_url: str
) -> None:
    """One click delivered to two instances on one Postgres: one decision, one execution, one answer."""
    script = ReactScript()
    agent = _agent_file(tmp_path, ["channel_react"])
    common: dict[str, Any] = {
        "database_url": database_url,
        "model": scripted(script),
        "agent_file": agent,
    }
    async with (
        AppHarness(slack, data_dir=tmp_path / "a", owner="instance-a", **common) as a,
        AppHarness(slack, data_dir=tmp_path / "b", owner="instance-b", **common) as b,
    ):
        root = await _ask(a, slack)
        # Either instance may run the conversation (both watch the shared inbox): wait for its card.
        await eventually(lambda: len(_cards(slack)) == 1)
        [card] = _cards(slack)
        click = _click(card, "U1", APPROVE, root)
        responses = await asyncio.gather(a.click(click), b.click(click), a.click(click))
        assert all(r.status == 200 for r in responses)
        await asyncio.gather(_settle(a), _settle(b))
        await asyncio.gather(_settle(a), _settle(b))
    assert slack.count("reactions.add") == 1
    assert script.results == [[{"ok": True}]]
    assert [m["text"] for m in slack.bot_messages("C1")].count("outcome: ok") == 1
    assert slack.ephemerals == []


async def test_a_click_whose_container_is_not_the_card_decides_nothing(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """A signed click carrying a real approval id but pointing at another channel, or at another
    message of the thread, is refused as unknown: the call does not run and the card stays open."""
    script = ReactScript()
    slack.add_channel("C9", "finance")
    elsewhere = slack.add_message("C9", "Q3 numbers", user="U1")
    async with _gated(slack, tmp_path, script) as app:
        root = await _ask(app, slack)
        [card] = _cards(slack)
        for channel, ts in (("C9", elsewhere), ("C1", root)):
            click = events.block_actions(
                channel=channel,
                user="U1",
                message_ts=ts,
                thread_ts=ts,
                action_id=APPROVE,
                value=_approval_id(card, APPROVE),
            )
            assert (await app.click(click)).status == 200
            await _settle(app)
        assert app.service is not None
        approval = await app.service.store.get_approval(_approval_id(card, APPROVE))
        assert approval is not None and approval.decision is None
    assert _bot_reactions(slack, root) == [] and slack.count("reactions.add") == 0
    assert script.results == []
