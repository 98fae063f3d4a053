"""The agent asks the thread (issue 24): questions with options or free text, approvals it requests
itself, and no_reply — end to end against the emulator over real HTTP."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError
from pydantic_ai.messages import ToolReturnPart

from app.agent.ask_cards import ASK_APPROVE, ASK_DENY, OPTION_ACTIONS
from app.runs import scheduler as scheduler_module
from channel.tools import CATALOG
from storage.base import StoreError
from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.process import ServerProcess, server_env
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack


class AskScript:
    """On the person's first message: enable the ask tools, then call ``tool`` with ``args`` (the
    turn ends there). On any later prompt: record it, and reply ``got: <prompt rows>``."""

    def __init__(self, tool: str = "channel_ask", later: list[Any] | None = None, **args: Any) -> None:
        self.tool = tool
        self.args = args
        self.later = later
        self.asked: list[Any] = []
        self.prompts: list[str] = []
        self.results: list[tuple[str, Any]] = []
        self.after_ask: list[Turn] = []

    def __call__(self, turn: Turn) -> list[Any]:
        self.results += turn.results
        for message in turn.messages:  # the ask's result is seen by the next run, in its history
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.tool_name == self.tool:
                    content = part.content
                    self.asked.append(json.loads(content) if isinstance(content, str) else content)
        if turn.prompt and "please ask" in turn.prompt:
            return [call("tool_search", query=self.tool.removeprefix("channel_"), limit=3)]
        if any(name == "tool_search" for name, _ in turn.results):
            return [call(self.tool, **self.args)]
        if any(name == self.tool for name, _ in turn.results):
            self.after_ask.append(turn)  # never reached: the turn ended with the ask
            return ["should not be posted"]
        if turn.prompt:
            self.prompts.append(turn.prompt)
            if self.later is not None:
                return self.later
            return [call("channel_reply", text="got it")]
        return [""]

    @property
    def handle(self) -> str:
        result = self.asked[-1]
        return str(result.get("question") or result.get("approval"))


def _cards(slack: FakeSlack) -> list[dict[str, Any]]:
    return [m for m in slack.bot_messages("C1") if _is_card(m)]


def _card(slack: FakeSlack, ts: str) -> dict[str, Any]:
    return next(m for m in slack.bot_messages("C1") if m["ts"] == ts)


def _buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in card.get("blocks", []) if b["type"] == "actions" for e in b["elements"]]


def _click(card: dict[str, Any], user: str, button: dict[str, Any], root: str) -> dict[str, Any]:
    return events.block_actions(
        channel="C1",
        user=user,
        message_ts=card["ts"],
        thread_ts=root,
        action_id=button["action_id"],
        value=button["value"],
    )


async def _settle(app: AppHarness) -> None:
    assert app.service is not None and app.service.approvals is not None
    await app.idle()
    await app.service.approvals.idle()
    await app.idle()


async def _start(app: AppHarness, slack: FakeSlack, text: str = "<@UBOT> please ask") -> str:
    root = slack.add_message("C1", text, user="U1")
    assert (await app.deliver(events.app_mention("C1", "U1", text, root))).status == 200
    await _settle(app)
    return root


async def _say(app: AppHarness, slack: FakeSlack, user: str, text: str, root: str) -> None:
    ts = slack.add_message("C1", text, user=user, thread_ts=root)
    assert (await app.deliver(events.message("C1", user, text, ts, thread_ts=root))).status == 200
    await _settle(app)


def _is_card(message: dict[str, Any]) -> bool:
    blocks = json.dumps(message.get("blocks", []))
    return "*Question*" in blocks or "*Approval requested*" in blocks


def _replies(slack: FakeSlack) -> list[str]:
    return [m["text"] for m in slack.bot_messages("C1") if not _is_card(m)]


async def test_a_question_with_options_is_answered_by_a_click_once(slack: FakeSlack, tmp_path: Path) -> None:
    """channel_ask with options posts a card with one button per option and ends the turn; the
    requester's click resumes the task with "Alice answered q_…: staging"; the card then shows who
    answered what without buttons, and a second click changes nothing."""
    script = AskScript(question="Deploy **where**?", options=["staging", "production"])
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        root = await _start(app, slack)
        [card] = _cards(slack)
        assert card["thread_ts"] == root
        assert [b["text"]["text"] for b in _buttons(card)] == ["staging", "production"]
        assert script.after_ask == []
        assert _replies(slack) == [] and script.prompts == []  # the turn ended with the question
        assert app.service is not None and not app.service.runner.executor.active_runs

        staging = _buttons(card)[0]
        assert (await app.click(_click(card, "U1", staging, root))).status == 200
        await _settle(app)
        assert (await app.click(_click(card, "U1", _buttons(card)[1], root))).status == 200
        await _settle(app)
    [prompt] = script.prompts
    assert script.handle.startswith("q_") and script.asked[-1]["status"] == "asked"
    assert f"Alice answered {script.handle}: staging" in prompt
    assert _replies(slack) == ["got it"]
    updated = _card(slack, card["ts"])
    assert _buttons(updated) == [] and "<@U1> answered *staging*" in json.dumps(updated["blocks"])
    assert "already answered" in slack.ephemerals[-1][3]


async def test_a_click_by_someone_not_allowed_gets_an_ephemeral_note(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Only the requester (or APPROVERS) may answer by default: anyone else is told privately and
    nothing changes; with only_requester false anyone in the conversation may answer."""
    script = AskScript(question="Which one?", options=["a", "b"])
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        root = await _start(app, slack)
        [card] = _cards(slack)
        assert (await app.click(_click(card, "U2", _buttons(card)[1], root))).status == 200
        await _settle(app)
        assert slack.ephemerals[-1][:2] == ("C1", "U2") and "Only <@U1>" in slack.ephemerals[-1][3]
        assert script.prompts == [] and _buttons(_card(slack, card["ts"]))
    anyone = AskScript(question="Which one?", options=["a", "b"], only_requester=False)
    async with AppHarness(slack, model=scripted(anyone), data_dir=tmp_path / "b") as app:
        root = await _start(app, slack)
        card = _cards(slack)[-1]
        assert (await app.click(_click(card, "U2", _buttons(card)[1], root))).status == 200
        await _settle(app)
    assert "Bob answered" in anyone.prompts[0] and ": b" in anyone.prompts[0]


async def test_a_message_written_while_the_model_asks_is_answered_by_the_next_run(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Bob writes while the model is writing its ``channel_ask`` step: that step ends the turn before
    another model request, so Bob's message never reached the model in that run; it is not consumed
    unseen but answered by the next run (the ask still waits for its answer)."""
    script = AskScript(question="Which one?", options=["staging", "prod"])
    bob: list[str] = []

    async def model(turn: Turn) -> list[Any]:
        if any(name == "tool_search" for name, _ in turn.results) and not bob:
            # The model is writing its ask: Bob's message arrives meanwhile.
            ts = slack.add_message("C1", "bob wonders about the release", user="U2", thread_ts=root)
            bob.append(ts)
            assert (
                await app.deliver(
                    events.message("C1", "U2", "bob wonders about the release", ts, thread_ts=root)
                )
            ).status == 200
        return script(turn)

    async with AppHarness(slack, model=scripted(model), data_dir=tmp_path) as app:
        root = slack.add_message("C1", "<@UBOT> please ask", user="U1")
        assert (await app.deliver(events.app_mention("C1", "U1", "<@UBOT> please ask", root))).status == 200
        await _settle(app)
    assert bob and len(_cards(slack)) == 1
    assert [p for p in script.prompts if "bob wonders about the release" in p], script.prompts
    assert _replies(slack) == ["got it"]


async def test_a_free_text_question_is_answered_by_the_next_message(slack: FakeSlack, tmp_path: Path) -> None:
    """Without options the card has no buttons; the next message in the thread from the requester
    is the answer (someone else's message is just a message)."""
    script = AskScript(question="What should the release be called?")
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        root = await _start(app, slack)
        [card] = _cards(slack)
        assert _buttons(card) == [] and "Reply in this thread" in json.dumps(card["blocks"])
        await _say(app, slack, "U2", "I would call it Bob", root)
        await _say(app, slack, "U1", "Call it Zephyr", root)
    first, second = script.prompts
    assert "answered" not in first and "I would call it Bob" in first
    assert f"Alice answered {script.handle}: Call it Zephyr" in second
    assert "<@U1> answered *Call it Zephyr*" in json.dumps(_card(slack, card["ts"])["blocks"])


async def test_an_approval_requested_is_decided_after_a_restart_and_resumes_once(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """channel_request_approval posts an Approve/Deny card and returns ap_… pending; while it is
    open, channel_check_approval says pending; approved after a restart, the task resumes once."""
    checks: list[Any] = []

    def later(turn: Turn) -> list[Any]:
        return []

    script = AskScript(
        tool="channel_request_approval", action="Archive **40** tickets", details="All closed before May."
    )
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        root = await _start(app, slack)
        [card] = _cards(slack)
        assert [b["action_id"] for b in _buttons(card)] == [ASK_APPROVE, ASK_DENY]
    handle = _buttons(card)[0]["value"]
    assert handle.startswith("ap_")

    def check_script(turn: Turn) -> list[Any]:
        checks.extend(r for n, r in turn.results if n == "channel_check_approval")
        if turn.prompt and "status?" in turn.prompt:
            return [call("channel_check_approval", approval=handle)]
        if any(name == "channel_check_approval" for name, _ in turn.results):
            return [call("channel_reply", text="still waiting")]
        if turn.results:
            return [""]
        if turn.prompt:
            script.prompts.append(turn.prompt)
            return [call("channel_reply", text="archiving")]
        return [""]

    async with AppHarness(slack, model=scripted(check_script), data_dir=tmp_path) as app:
        await _say(app, slack, "U1", "status?", root)
        assert checks == [{"status": "pending"}]
        assert (await app.click(_click(card, "U1", _buttons(card)[0], root))).status == 200
        await _settle(app)
        assert (await app.click(_click(card, "U1", _buttons(card)[0], root))).status == 200
        await _settle(app)
        await _say(app, slack, "U1", "status?", root)
    [resumed] = script.prompts
    assert f"Alice approved {handle}" in resumed
    assert _replies(slack) == ["still waiting", "archiving", "still waiting"]
    assert checks[1]["status"] == "approved" and checks[1]["by"] == "Alice" and "T" in checks[1]["at"]
    assert "Approved* by <@U1>" in json.dumps(_card(slack, card["ts"])["blocks"])


async def test_an_unanswered_ask_expires_and_resumes_the_model(slack: FakeSlack, tmp_path: Path) -> None:
    """Unanswered after APPROVAL_TTL the sweep decides it expired (the clock is moved, nothing
    sleeps): the model is resumed with 'expired', the card says so, and a late click changes nothing."""
    script = AskScript(question="Which?", options=["a", "b"])
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, approval_ttl=600) as app:
        assert app.service is not None and app.service.approvals is not None
        root = await _start(app, slack)
        [card] = _cards(slack)
        app.service.approvals.clock = lambda: time.time() + 601
        assert await app.service.runner.sweep() is not None
        await _settle(app)
        assert (await app.click(_click(card, "U1", _buttons(card)[0], root))).status == 200
        await _settle(app)
    [prompt] = script.prompts
    assert f"Nobody answered {script.handle} in time: expired" in prompt
    assert "Expired" in json.dumps(_card(slack, card["ts"])["blocks"])
    assert "already answered" in slack.ephemerals[-1][3]


@pytest.mark.parametrize("stream", ["auto", "off"])
async def test_no_reply_posts_nothing_even_when_streaming(
    slack: FakeSlack, tmp_path: Path, stream: str
) -> None:
    """A turn ended with no_reply posts nothing (text streamed before it is removed, nothing after it
    is written, the model is not asked again), and it is counted as a silent turn in /metrics. Two
    turns, one after the other (a run starts as soon as its delivery is acknowledged, so a message
    delivered right after another may reach the first run or start the next)."""
    calls = 0

    def script(turn: Turn) -> list[Any]:
        nonlocal calls
        calls += 1
        if turn.prompt:
            return ["This is not for me, I think", call("no_reply")]
        return ["final text that must not be posted"]

    async with AppHarness(slack, model=scripted(script, chunk=4), data_dir=tmp_path, stream=stream) as app:
        root = slack.add_message("C1", "<@UBOT> hi", user="U1")
        await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", root))
        await _settle(app)
        ts = slack.add_message("C1", "talking to Bob", user="U1", thread_ts=root)
        await app.deliver(events.message("C1", "U1", "talking to Bob", ts, thread_ts=root))
        await _settle(app)
        assert app.service is not None
        metrics = app.service.observer.metrics.render().decode()
    assert calls == 2  # one request a turn: none after no_reply
    assert slack.bot_messages("C1") == []
    assert slack.statuses and slack.statuses[-1].status == ""  # the status cleared
    assert "threadbound_silent_turns_total 2.0" in metrics


def test_option_actions_are_distinct() -> None:
    """Each option position has its own action id (Slack wants them unique within a card)."""
    assert len(set(OPTION_ACTIONS)) == 5


async def test_two_instances_an_answer_clicked_on_one_resumes_the_task_once(
    tmp_path: Path, database_url: str
) -> None:
    """Two instances on one Postgres: the question is asked through one; the same click delivered to
    both at once is decided once and the task resumes once, with the answer."""
    script = AskScript(question="Deploy where?", options=["staging", "production"])
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        common: dict[str, Any] = {"database_url": database_url, "model": scripted(script)}
        async with (
            AppHarness(slack, data_dir=tmp_path / "a", owner="instance-a", **common) as a,
            AppHarness(slack, data_dir=tmp_path / "b", owner="instance-b", **common) as b,
        ):
            root = await _start(a, slack)
            # Either instance may run the conversation (b's start-up sweep can find a's inbox item
            # before a's own driver takes the lease): wait for the card, then for both to settle.
            await eventually(lambda: len(_cards(slack)) == 1)
            await asyncio.gather(_settle(a), _settle(b))
            [card] = _cards(slack)
            click = _click(card, "U1", _buttons(card)[1], root)
            responses = await asyncio.gather(b.click(click), a.click(click), b.click(click))
            assert all(r.status == 200 for r in responses)
            for _ in range(50):
                await asyncio.gather(_settle(a), _settle(b))
                if script.prompts:
                    break
                await asyncio.sleep(0.1)
            await asyncio.gather(_settle(a), _settle(b))
    [prompt] = script.prompts
    assert f"Alice answered {script.handle}: production" in prompt
    assert _replies(slack) == ["got it"]
    assert slack.ephemerals == []  # the same click again is no news to its clicker


async def test_handles_are_task_scoped(slack: FakeSlack, tmp_path: Path) -> None:
    """channel_check_approval refuses an approval of another conversation, and a question handle."""
    script = AskScript(tool="channel_request_approval", action="Archive the tickets")
    checks: list[Any] = []
    handles: list[str] = []

    def other(turn: Turn) -> list[Any]:
        checks.extend(r for n, r in turn.results if n == "channel_check_approval")
        if turn.prompt and "check" in turn.prompt:
            return [call("tool_search", query="check approval", limit=1)]
        if any(n == "tool_search" for n, _ in turn.results):
            return [call("channel_check_approval", approval=h) for h in handles]
        return [""]

    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        await _start(app, slack)
        [card] = _cards(slack)
        handles += [_buttons(card)[0]["value"], "ap_" + "A" * 22]
    async with AppHarness(slack, model=scripted(other), data_dir=tmp_path) as app:
        await _start(app, slack, "<@UBOT> please check")
    assert [c["error"]["code"] for c in checks] == ["invalid_handle", "invalid_handle"]


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("channel_ask", {"question": "Which?", "options": ["only one"]}),
        ("channel_ask", {"question": "Which?", "options": ["a", "b", "c", "d", "e", "f"]}),
        ("channel_ask", {"question": "Which?", "options": ["a", "x" * 76]}),
        ("channel_ask", {"question": "q" * 2001}),
        ("channel_ask", {"question": ""}),
        ("channel_request_approval", {"action": "a" * 2001}),
        ("channel_request_approval", {"action": "archive", "details": "d" * 2001}),
        ("channel_check_approval", {"approval": "q_AAAAAAAAAAAAAAAAAAAAAA"}),
        ("no_reply", {"why": "because"}),
    ],
)
def test_every_input_is_bounded(tool: str, args: dict[str, Any]) -> None:
    """Questions, options, actions and details have bounds; a handle must be an ap_… one; no_reply
    takes nothing: anything else is refused by the tool's own model before any host call."""
    with pytest.raises(ValidationError):
        CATALOG[tool].args.model_validate(args)


def _ask_script(request: dict[str, Any]) -> Reply:
    """Over the OpenAI wire: on "please ask", find and call channel_ask; once answered, say so."""
    text = last_user_text(request)
    messages = request.get("messages") or [{}]
    called = [
        str(c["function"]["name"])
        for m in messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    if "answered q_" in text:
        return FakeOpenAI.text("deploying to " + ("staging" if "staging" in text else "?"))
    if messages[-1].get("role") != "tool":
        return FakeOpenAI.tool_call("tool_search", {"query": "ask a question", "limit": 3})
    refused = called[-1] == "channel_ask" and '"error"' in str(messages[-1].get("content"))
    if called[-1] == "tool_search" or refused:  # a question not recorded is asked again
        return FakeOpenAI.tool_call("channel_ask", {"question": "Which one?", "options": ["staging", "prod"]})
    return FakeOpenAI.text("should not be posted")


def _settled(db_path: Path) -> bool:
    """No journal entry is open and no run is left open (the restart settled the interrupted one)."""
    with sqlite3.connect(db_path) as db:
        effects = db.execute("SELECT count(*) FROM effects WHERE state = 'open'").fetchone()[0]
        runs = db.execute("SELECT count(*) FROM tasks WHERE run_open").fetchone()[0]
    return effects == 0 and runs == 0


@pytest.mark.process
@pytest.mark.parametrize("point", ["slack.post.after", "slack.post.before", "store.journal_open.after"])
async def test_an_ask_killed_around_its_card_posts_it_once_and_its_answer_resumes(
    tmp_path: Path, point: str
) -> None:
    """SIGKILL right after the card is posted (or right before), its result unrecorded: the restart finds
    the card by its effect id or posts it (one card, no "result unavailable"); a click resumes the task.
    Killed between the card's journal entry and the ask's record: the restart closes the entry (the
    question was not recorded), the model asks again, and that one card is answered."""
    async with FakeSlack() as slack, FakeOpenAI(_ask_script) as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_API_URL": slack.api_url,
            "DATA_DIR": str(tmp_path / "data"),
            "MODEL": "openai-chat:fake",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "x",
            "STREAM": "off",
            "WRITE_IN_FLIGHT": "2",  # a card not posted before the kill is waited out this long
        }
        first = ServerProcess(
            {**env, "THREADBOUND_CRASH_AT": point}, cwd=tmp_path, log_path=tmp_path / "s1.log"
        )
        await first.start()
        root = slack.add_message("C1", "<@UBOT> please ask", user="U1")
        mention = events.app_mention("C1", "U1", "<@UBOT> please ask", root)
        assert (
            await events.deliver(http, f"{first.url}/slack/events", mention, SIGNING_SECRET)
        ).status == 200
        assert await first.wait() == -9  # killed right after (or before) the card was posted
        assert len(_cards(slack)) == (1 if point == "slack.post.after" else 0)
        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "s2.log")
        await second.start()
        try:
            asked = len(llm.requests)
            await eventually(lambda: _settled(tmp_path / "data" / "threadbound.db"))  # the resumed run ended
            [card] = _cards(slack)
            staging = next(b for b in _buttons(card) if "staging" in json.dumps(b))
            click = _click(card, "U1", staging, root)
            assert (
                await events.deliver_interaction(http, f"{second.url}/slack/events", click, SIGNING_SECRET)
            ).status == 200
            await eventually(lambda: "deploying to staging" in _replies(slack))
        finally:
            await second.stop()
    assert len(_cards(slack)) == 1 and "should not be posted" not in _replies(slack)
    results = [m for r in llm.requests[asked:] for m in r["messages"] if m.get("role") == "tool"]
    assert all("unavailable" not in m["content"] and "interrupted" not in m["content"] for m in results)


class AskTwiceScript:
    """Asks a free-text question; when that call fails, asks it again (as a model would). Later
    prompts are recorded and answered "got it"."""

    def __init__(self) -> None:
        self.asked: dict[str, Any] = {}  # the channel_ask results by call id, as the transcript has them
        self.prompts: list[str] = []

    def __call__(self, turn: Turn) -> list[Any]:
        for message in turn.messages:
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.tool_name == "channel_ask":
                    content = part.content
                    parsed = json.loads(content) if isinstance(content, str) else content
                    self.asked[part.tool_call_id] = parsed
        if turn.prompt and "please ask" in turn.prompt:
            return [call("tool_search", query="ask", limit=3)]
        asked = [r for name, r in turn.results if name == "channel_ask"]
        if any(name == "tool_search" for name, _ in turn.results) or (asked and "error" in asked[-1]):
            return [call("channel_ask", question="What should the release be called?")]
        if turn.prompt:
            self.prompts.append(turn.prompt)
            return [call("channel_reply", text="got it")]
        return [""]


@pytest.mark.parametrize("withdrawn", [True, False], ids=["withdrawn", "withdraw-failed"])
async def test_an_ask_whose_card_was_never_journalled_takes_no_answer_and_wakes_nobody(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, withdrawn: bool
) -> None:
    """The store fails right after the first ask's record is written (its card never posted): the
    model asks again, the person's answer in the thread reaches the question they can see, and at
    expiry no "nobody answered" turn wakes the task for the question nobody saw. When the store also
    refuses to withdraw the record, the resumed run closes it before the model asks again."""
    script = AskTwiceScript()
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, approval_ttl=600) as app:
        assert app.service is not None and app.service.approvals is not None
        store = app.service.store
        real_open_ask, real_decide_ask = store.open_ask, store.decide_ask
        orphans: list[str] = []

        async def open_ask_then_fail(record: Any) -> None:
            await real_open_ask(record)
            if not orphans:
                orphans.append(record.ask_id)
                raise StoreError("the session ended after the commit")

        refusals = [] if withdrawn else [StoreError("the session ended")]

        async def decide_ask(ask_id: str, **kwargs: Any) -> bool:
            if ask_id in orphans and refusals:
                raise refusals.pop()  # the withdrawal, the orphan's first decision
            return await real_decide_ask(ask_id, **kwargs)

        monkeypatch.setattr(store, "open_ask", open_ask_then_fail)
        monkeypatch.setattr(store, "decide_ask", decide_ask)
        # The store error stops the run; it is taken up again after the driver's back-off.
        monkeypatch.setattr(scheduler_module, "DRIVER_RETRY_S", 0.05)
        root = await _start(app, slack)
        await eventually(lambda: len(_cards(slack)) == 1)
        await _settle(app)
        [card] = _cards(slack)
        [orphan] = orphans
        before = await store.get_ask(orphan)
        # Withdrawn at once, or (its withdrawal refused) closed by the resumed run before the next ask.
        assert before is not None and before.card_ts == "" and before.decision == "expired"
        await _say(app, slack, "U1", "Call it Zephyr", root)
        after = await store.get_ask(orphan)
        assert after is not None and after.decision == "expired" and after.decided_by == ""
        failed, live = script.asked.values()
        # The resumed run settles the first ask's journal entry: never recorded with a card, not posted.
        assert failed["error"]["code"] == "not_found" and live["status"] == "asked"
        app.service.approvals.clock = lambda: time.time() + 601
        await app.service.runner.sweep()
        await _settle(app)
    [answered] = script.prompts
    assert f"Alice answered {live['question']}: Call it Zephyr" in answered
    assert "<@U1> answered *Call it Zephyr*" in json.dumps(_card(slack, card["ts"])["blocks"])
    assert len(_cards(slack)) == 1 and _replies(slack) == ["got it"]


@pytest.mark.process
async def test_a_card_whose_redraw_a_kill_cut_off_is_redrawn_by_the_run_its_answer_resumes(
    tmp_path: Path,
) -> None:
    """SIGKILL right before the clicked card is redrawn (its answer already stored): the restarted
    process's run, resumed by that answer, redraws the card, so it no longer offers its buttons."""
    async with FakeSlack() as slack, FakeOpenAI(_ask_script) as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"))
        first = ServerProcess(
            {**env, "THREADBOUND_CRASH_AT": "slack.update.before"}, cwd=tmp_path, log_path=tmp_path / "s1.log"
        )
        await first.start()
        root = slack.add_message("C1", "<@UBOT> please ask", user="U1")
        mention = events.app_mention("C1", "U1", "<@UBOT> please ask", root)
        assert (
            await events.deliver(http, f"{first.url}/slack/events", mention, SIGNING_SECRET)
        ).status == 200
        await eventually(lambda: len(_cards(slack)) == 1)
        [card] = _cards(slack)
        staging = next(b for b in _buttons(card) if "staging" in json.dumps(b))
        click = _click(card, "U1", staging, root)
        try:
            answered = await events.deliver_interaction(
                http, f"{first.url}/slack/events", click, SIGNING_SECRET
            )
            assert answered.status == 200
        except aiohttp.ServerDisconnectedError:
            pass  # the redraw runs beside the answer: the kill may come before the 200 is written
        assert await first.wait() == -9  # killed as it was about to redraw the card
        assert _buttons(_card(slack, card["ts"]))  # the card still offers its choices
        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "s2.log")
        await second.start()
        try:
            await eventually(lambda: "deploying to staging" in _replies(slack))
            await eventually(lambda: not _buttons(_card(slack, card["ts"])))
        finally:
            await second.stop()
    assert "<@U1> answered *staging*" in json.dumps(_card(slack, card["ts"])["blocks"])
