"""Profiles in the agent file: one per conversation, by precedence; tools, people and guests scoped
by it, over the real HTTP edge and the emulator."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.agent.admission import Admission
from app.agent.agent_file import AgentFile
from app.agent.mcp.servers import McpServers
from app.agent.mcp.toolset import McpToolset
from app.agent.profiles import DEFAULT, Profile, Profiles
from app.intake.router import classify
from app.settings import Settings
from channel.slack.identity import SlackIdentity
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

PROFILES = """
instructions = "You are the team's assistant."
approval = ["channel_retract"]

[profiles.support]
channels = ["#support"]
instructions = "Customers may be watching: be brief."
tools = ["channel_reply"]
approval = []
approvers = ["U9", "@leads"]
guests = true
user_daily_token_budget = 5000

[profiles.ops]
channels = ["C7", "#ops"]
users = ["U1", "@oncall"]

[profiles.direct]
channels = ["dm"]
mcp = []
"""


def _file(tmp_path: Path, body: str = PROFILES) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_one_profile_per_conversation_by_precedence(tmp_path: Path) -> None:
    """Channel id beats #name beats dm beats "*"; a conversation no profile names gets the default,
    and every key a profile does not set is the default's."""
    profiles = AgentFile.load(_file(tmp_path, PROFILES + '\n[profiles.rest]\nchannels = ["*"]\n')).profiles
    assert profiles.choose("C5", "support").name == "support"
    assert profiles.choose("C7", "support").name == "ops"  # the id wins over the name
    assert profiles.choose("D1", is_dm=True).name == "direct"
    assert profiles.choose("C5", "random").name == "rest"
    without_rest = AgentFile.load(_file(tmp_path)).profiles
    assert without_rest.choose("C5", "random").name == DEFAULT
    support = profiles.choose("C5", "support")
    assert support.instructions == "You are the team's assistant.\n\nCustomers may be watching: be brief."
    assert support.approval == () and support.guests is True and support.user_daily_token_budget == 5000
    ops = profiles.choose("C7")
    assert ops.approval == ("channel_retract",) and ops.tools is None and ops.guests is None
    assert ops.groups == ("oncall",)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[profiles.x]\nchannels = ["support"]\n', "is not a #channel-name"),
        ('[profiles.x]\nchannels = ["#a"]\ncolour = "red"\n', "unknown keys ['colour']"),
        ('[profiles.x]\nchannels = ["#a"]\n[profiles.y]\nchannels = ["#a"]\n', "keep one"),
        ('[profiles.x]\nchannels = ["#a"]\nusers = ["alice"]\n', "is not a user id"),
        ('[profiles.default]\nchannels = ["#a"]\n', "not 'default'"),
        ('[profiles.x]\nchannels = ["#a"]\nguests = "no"\n', "guests must be true or false"),
    ],
)
def test_a_mistaken_profile_stops_start_up_naming_it(tmp_path: Path, body: str, message: str) -> None:
    """Each mistake names the profile's table and the problem, with a line."""
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        AgentFile.load(_file(tmp_path, body))
    assert "agent.toml" in str(raised.value)


def test_an_agent_file_without_profiles_is_its_own_default(tmp_path: Path) -> None:
    """Existing files keep working: the top-level keys are the one (default) profile."""
    loaded = AgentFile.load(_file(tmp_path, 'tools = ["channel_reply"]\napproval = ["channel_react"]\n'))
    assert loaded.profiles.named == ()
    assert loaded.profiles.choose("C1", "general").tools == ("channel_reply",)
    assert loaded.profiles.default.approval == ("channel_react",)


async def test_the_same_question_in_two_channels_offers_different_tools(tmp_path: Path) -> None:
    """In #general (the default) channel_react is offered and runs; in #support, whose profile allows
    only channel_reply, it is not offered, and a model that names it anyway makes no reaction."""
    offered: dict[str, list[str]] = {}
    instructions: dict[str, str] = {}

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            where = "support" if "#support" in (turn.info.instructions or "") else "general"
            offered[where] = turn.tools
            instructions[where] = turn.info.instructions or ""
            handle = re.search(r"msg_[A-Za-z0-9_-]+", turn.prompt)
            assert handle is not None
            return [call("channel_react", message=handle.group(0), emoji="eyes")]
        if turn.step == 1:
            return [call("channel_reply", text="done")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "support")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=_file(tmp_path)
        ) as app:
            for channel in ("C1", "C2"):
                ts = slack.add_message(channel, "<@UBOT> is the login page down?", user="U1")
                await app.deliver(events.app_mention(channel, "U1", "<@UBOT> is the login page down?", ts))
                await app.idle()
    assert "channel_react" in offered["general"]
    assert offered["support"] == ["channel_reply"] or "channel_react" not in offered["support"]
    assert "Customers may be watching" in instructions["support"]
    assert "Customers may be watching" not in instructions["general"]
    reacted = [c.params.get("channel") for c in slack.calls if c.method == "reactions.add"]
    assert reacted == ["C1"]
    assert [m["text"] for m in slack.bot_messages("C2")] == ["done"]


async def test_a_forbidden_tool_named_at_call_time_is_refused_by_the_session(tmp_path: Path) -> None:
    """Below pydantic-ai's own check: a session of the #support profile refuses channel_react when
    called directly, and the MCP toolset refuses a server's tool the profile leaves out."""
    async with FakeSlack() as slack:
        slack.add_channel("C2", "support")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(lambda turn: [""]), data_dir=tmp_path / "data", agent_file=_file(tmp_path)
        ) as app:
            assert app.service is not None
            executor = app.service.runner.executor
            policy = await executor.policy("C2")
            assert policy.profile.name == "support"
            assert [s.name for s in policy.tools.channel_tools] == ["channel_reply"]
            task = SimpleNamespace(task_id="t1", channel="C2", thread_ts="1.0", enabled_tools=[])
            session = SimpleNamespace(tools=policy.tools, task=task)
            toolset = McpToolset(McpServers([]))
            ctx: Any = SimpleNamespace(deps=SimpleNamespace(session=session))
            result, outcome = await toolset._call("tickets_close_ticket", {"id": 1}, ctx)
            assert outcome == "denied" and result["error"]["code"] == "denied"


async def test_a_guest_is_not_served_unless_their_profile_allows_guests(tmp_path: Path) -> None:
    """Through the HTTP edge: a guest's mention in #general (ALLOW_GUESTS off) reaches no model and
    posts nothing; in #support (profile guests = true) the same guest is answered."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text="hello")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "support")
        slack.add_guest("UG", "gus", single_channel=True)
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=_file(tmp_path)
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> what is our revenue?", user="UG")
            response = await app.deliver(events.app_mention("C1", "UG", "<@UBOT> what is our revenue?", ts))
            assert response.status == 200
            await app.idle()
            assert prompts == [] and slack.bot_messages("C1") == []
            ts = slack.add_message("C2", "<@UBOT> how do I reset my password?", user="UG")
            await app.deliver(events.app_mention("C2", "UG", "<@UBOT> how do I reset my password?", ts))
            await app.idle()
    assert len(prompts) == 1 and "reset my password" in prompts[0]
    assert [m["text"] for m in slack.bot_messages("C2")] == ["hello"]


async def test_allow_guests_serves_guests_where_no_profile_says_otherwise(tmp_path: Path) -> None:
    """With ALLOW_GUESTS on, the default profile serves a guest."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_guest("UG", "gus")
        model = scripted(lambda turn: [call("channel_reply", text="hi")] if turn.prompt else [""])
        async with AppHarness(slack, model=model, data_dir=tmp_path, allow_guests=True) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="UG")
            await app.deliver(events.app_mention("C1", "UG", "<@UBOT> hi", ts))
            await app.idle()
    assert [m["text"] for m in slack.bot_messages("C1")] == ["hi"]


async def test_profile_users_admit_listed_people_and_usergroup_members(tmp_path: Path) -> None:
    """In #ops only U1 and members of @oncall are served; another member's message starts nothing,
    also in a thread the bot already answers."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text=f"answer {len(prompts)}")]
        return [""]

    async with FakeSlack() as slack:
        slack.scopes.append("usergroups:read")
        slack.add_channel("C3", "ops")
        for user, name in (("U1", "alice"), ("U2", "bob"), ("U3", "carol")):
            slack.add_user(user, name, display_name=name.title())
        slack.add_usergroup("S1", "oncall", ["U3"])
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=_file(tmp_path)
        ) as app:
            root = slack.add_message("C3", "<@UBOT> restart the queue", user="U2")
            await app.deliver(events.app_mention("C3", "U2", "<@UBOT> restart the queue", root))
            await app.idle()
            assert prompts == []
            root = slack.add_message("C3", "<@UBOT> status of the queue?", user="U3")
            await app.deliver(events.app_mention("C3", "U3", "<@UBOT> status of the queue?", root))
            await app.idle()
            reply = slack.add_message("C3", "and the cache?", user="U2", thread_ts=root)
            await app.deliver(events.message("C3", "U2", "and the cache?", reply, thread_ts=root))
            await app.idle()
            reply = slack.add_message("C3", "and the database?", user="U1", thread_ts=root)
            await app.deliver(events.message("C3", "U1", "and the database?", reply, thread_ts=root))
            await app.idle()
    assert len(prompts) == 2
    assert "status of the queue" in prompts[0] and "and the database" in prompts[1]
    assert not any("cache" in p for p in prompts)


async def test_a_click_by_a_person_not_admitted_changes_nothing(tmp_path: Path) -> None:
    """A feedback click by someone outside ALLOWED_USERS, by a guest, from another organisation or
    from one neither the payload nor Slack can tell is not recorded, and the clicker is told
    privately; the allowed member's clicks count (their organisation told by users.info when the
    payload does not say)."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        slack.add_guest("UG", "gus")
        model = scripted(lambda turn: [call("channel_reply", text="answer")] if turn.prompt else [""])
        async with AppHarness(slack, model=model, data_dir=tmp_path, allowed_users="U1,UG,UX") as app:
            root = slack.add_message("C1", "<@UBOT> help", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> help", root))
            await app.idle()
            [answer] = slack.bot_messages("C1")
            value = _buttons(answer)["negative_button"]["value"]
            clicks = (("U2", "T1"), ("UG", "T1"), ("UX", ""), ("U1", "T2"), ("U1", ""), ("U1", "T1"))
            for user, team in clicks:
                click = events.block_actions(
                    channel="C1",
                    user=user,
                    message_ts=answer["ts"],
                    thread_ts=root,
                    action_id="threadbound_feedback",
                    value=value,
                    element="feedback_buttons",
                    team_id=team,
                )
                if not team:  # the organisation is not told: users.info is asked
                    click["user"].pop("team_id", None)
                    click.pop("team", None)
                assert (await app.click(click)).status == 200
            text = await (await app.get("/metrics")).text()
            assert 'threadbound_feedback_total{kind="negative"} 2.0' in text  # U1 told by Slack, U1 in T1
            assert app.service is not None
            await app.service.approvals.cards.idle()  # type: ignore[union-attr]
    told = [(user, text) for _, user, _, text in slack.ephemerals]
    assert sorted(u for u, t in told if "cannot use this app here" in t) == ["U1", "U2", "UG", "UX"]


def _buttons(message: dict[str, Any]) -> dict[str, Any]:
    for block in message.get("blocks") or []:
        for element in block.get("elements") or []:
            if element.get("action_id") == "threadbound_feedback":
                return dict(element)
    raise AssertionError("no feedback buttons")


async def test_an_event_whose_organisation_cannot_be_told_is_external(tmp_path: Path) -> None:
    """Neither user_team nor team in the event: Slack is asked (users.info team_id). A member of the
    workspace is served; a person Slack cannot place counts as external and reaches no model; one
    whose event names another organisation is ignored at the edge as before."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text="ok")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            for user, text in (("UX", "<@UBOT> from nowhere"), ("U1", "<@UBOT> from alice")):
                ts = slack.add_message("C1", text, user="U1")
                envelope = events.app_mention("C1", user, text, ts)
                envelope["event"].pop("team", None)
                envelope["event"].pop("user_team", None)
                assert (await app.deliver(envelope)).status == 200
                await app.idle()
            ts = slack.add_message("C1", "<@UBOT> from elsewhere", user="U1")
            envelope = events.app_mention("C1", "U1", "<@UBOT> from elsewhere", ts)
            envelope["event"]["user_team"] = "T2"
            await app.deliver(envelope)
            await app.idle()
    assert len(prompts) == 1 and "from alice" in prompts[0]
    settings = Settings(_env_file=None, slack_bot_token="xoxb-x", slack_signing_secret="s")  # type: ignore[call-arg]
    bot = SlackIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1", team_url="", scopes=())
    event = {"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> hi", "ts": "1.0"}
    assert classify({**event, "team": "T1", "user_team": "T2"}, bot, settings).external


async def test_admission_fails_closed_when_a_group_cannot_be_listed() -> None:
    """A profile's @group that cannot be listed (no usergroups:read) admits nobody through it;
    a conversation the profile does not name is not affected."""

    class Directory:
        async def person(self, user_id: str) -> Any:
            return SimpleNamespace(known=True, guest=False, active=True)

        async def group_members(self, handle: str) -> frozenset[str] | None:
            return None

        async def conversation(self, channel: str) -> Any:
            return SimpleNamespace(name="ops" if channel == "C3" else "general", is_dm=False)

    ops = Profile(name="ops", channels=("#ops",), users=("@oncall",))
    admission = Admission(profiles=Profiles(Profile(), (ops,)), directory=Directory(), team="T1")
    assert await admission.refusal("C3", "U3") == "not among the users of profile ops"
    assert await admission.refusal("C4", "U3") is None


async def test_a_profile_gates_its_own_calls_and_names_its_own_approvers(tmp_path: Path) -> None:
    """In #general's profile channel_react waits for approval and @leads decide it (not the requester,
    with APPROVAL_BY=approvers); in the default profile (#random) the same call runs at once."""
    from tests.test_approvals import APPROVE, ReactScript, _cards, _click, _settle

    agent = _file(
        tmp_path,
        '[profiles.gated]\nchannels = ["#general"]\napproval = ["channel_react"]\napprovers = ["@leads"]\n',
    )
    async with FakeSlack() as slack:
        slack.scopes.append("usergroups:read")
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "random")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        slack.add_usergroup("S1", "leads", ["U2"])
        async with AppHarness(
            slack,
            model=scripted(ReactScript()),
            data_dir=tmp_path / "data",
            agent_file=agent,
            approval_by="approvers",
            approvers=("U7",),
        ) as app:
            ts = slack.add_message("C2", "<@UBOT> please react", user="U1")
            await app.deliver(events.app_mention("C2", "U1", "<@UBOT> please react", ts))
            await _settle(app)
            assert [c.params["channel"] for c in slack.calls if c.method == "reactions.add"] == ["C2"]
            root = slack.add_message("C1", "<@UBOT> please react", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> please react", root))
            await _settle(app)
            [card] = _cards(slack)
            await app.click(_click(card, "U1", APPROVE, root))  # the requester is not an approver here
            await _settle(app)
            assert [c.params["channel"] for c in slack.calls if c.method == "reactions.add"] == ["C2"]
            await app.click(_click(card, "U2", APPROVE, root))  # @leads
            await _settle(app)
    assert [c.params["channel"] for c in slack.calls if c.method == "reactions.add"] == ["C2", "C1"]


async def test_a_profile_budget_holds_in_its_conversations_only(tmp_path: Path) -> None:
    """#random's profile sets a per-person budget of 100 tokens: past it, a request there gets the
    note and no model call, while the same person is still answered in #general (no budget)."""
    from pydantic_ai.usage import RequestUsage

    from tests.test_usage import mention, metered, reply_once

    calls: list[str] = []
    model = metered(reply_once, RequestUsage(input_tokens=60, output_tokens=10), calls)
    agent = _file(tmp_path, '[profiles.tight]\nchannels = ["#random"]\nuser_daily_token_budget = 100\n')
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "random")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=model, data_dir=tmp_path / "data", stream="off", agent_file=agent
        ) as app:
            delivery, _ = mention(app, slack, "U1", "first", channel="C2")  # 140 tokens
            await delivery
            await app.idle()
            delivery, ts = mention(app, slack, "U1", "second", channel="C2")
            await delivery
            await app.idle()
            assert len(calls) == 2
            [note] = [m for m in slack.messages("C2", ts) if m.get("bot_id")]
            assert "of your 100 daily model tokens" in note["text"]
            delivery, ts = mention(app, slack, "U1", "third", channel="C1")
            await delivery
            await app.idle()
    assert len(calls) == 4
    assert [m["text"] for m in slack.messages("C1", ts) if m.get("bot_id")] == ["answer"]


async def test_a_profile_approver_decides_an_approval_the_agent_requested(tmp_path: Path) -> None:
    """channel_request_approval in a conversation whose profile names U2 among its approvers: U2's
    click decides it (without the profile, only the requester or APPROVERS could)."""
    from tests.test_ask import ASK_APPROVE, AskScript, _buttons, _cards, _click, _start

    agent = _file(tmp_path, '[profiles.team]\nchannels = ["#general"]\napprovers = ["U2"]\n')
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        script = AskScript(tool="channel_request_approval", action="Archive the tickets")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=agent
        ) as app:
            root = await _start(app, slack)
            [card] = _cards(slack)
            [approve] = [b for b in _buttons(card) if b["action_id"] == ASK_APPROVE]
            assert (await app.click(_click(card, "U2", approve, root))).status == 200
            assert app.service is not None
            ask = await app.service.store.get_ask(approve["value"].partition(":")[0])
    assert ask is not None and ask.decision == "approved" and ask.decided_by == "U2"


def test_a_profile_without_a_server_keeps_the_default_tools_globs_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The default selects tickets_*; a profile whose mcp leaves tickets out starts without its tools
    (logged), and one that keeps it offers them."""
    from app.agent.mcp.servers import McpTool
    from app.runs.policies import profile_tools
    from channel.skills import SkillLibrary

    tickets = [McpTool("tickets_get_ticket", "tickets", "get_ticket", "Get a ticket", {}, "active")]
    wiki = [McpTool("wiki_search", "wiki", "search", "Search the wiki", {}, "deferred")]
    features = frozenset({"read", "react"})
    default = Profile(tools=("channel_reply", "tickets_*", "wiki_*"))
    closed = replace(default, name="closed", mcp=("wiki",))
    selected = profile_tools(closed, features, SkillLibrary([]), [*tickets, *wiki], {})
    assert [t.name for t in selected.host_tools] == ["wiki_search"]
    assert "profile closed leaves it out" in caplog.text
    everything = profile_tools(default, features, SkillLibrary([]), [*tickets, *wiki], {})
    assert [t.name for t in everything.host_tools] == ["tickets_get_ticket", "wiki_search"]
