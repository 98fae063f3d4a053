"""An MCP server's questions asked in the thread: a form card for the requester, answered by a click
through the HTTP edge while the call waits; a link told privately; time-outs, strangers, bad input."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from app.agent.mcp.elicitation import (
    FORM_CANCEL,
    FORM_DECLINE,
    FORM_SUBMIT,
    Unshowable,
    form_content,
    form_inputs,
)
from channel.slack.cards import input_block_id
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack
from threadbound_emulator import events as slack_events

PYTHON = sys.executable.replace("\\", "/")
TALKBACK = (Path(__file__).parent / "support" / "mcp_talkback.py").as_posix()
AGENT = f"""
[mcp.tb]
command = ["{PYTHON}", "{TALKBACK}"]
env = {{ TALKBACK_SECRET = "unused-here" }}
eager = ["plan_release", "open_dashboard"]
read_only = ["*"]  # approvals are not what this shows
timeout = 60
"""


def recorder(tool: str, seen: list[Any]) -> Any:
    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        return [call(tool)] if turn.step == 0 else [""]

    return scripted(script)


async def form_card(slack: FakeSlack, channel: str = "C1") -> dict[str, Any]:
    """The form card once the server's question was posted (the call is waiting on it)."""
    for _ in range(400):
        for message in slack.bot_messages(channel):
            if any(b.get("type") == "input" for b in message.get("blocks") or []):
                return message
        await asyncio.sleep(0.05)
    raise AssertionError("no form card was posted")


def click(slack: FakeSlack, card: dict[str, Any], user: str, action_id: str, values: dict[str, str]) -> Any:
    [actions] = [b for b in card["blocks"] if b["type"] == "actions"]
    [button] = [e for e in actions["elements"] if e["action_id"] == action_id]
    action = {
        "action_id": action_id,
        "block_id": actions["block_id"],
        "type": "button",
        "value": button["value"],
    }
    state = {input_block_id(k): v for k, v in values.items()}
    return slack_events.block_actions(slack, "C1", card["ts"], user, action, state)


async def conversation(tmp_path: Path, model: Any, **settings: Any) -> tuple[FakeSlack, AppHarness]:
    (tmp_path / "agent.toml").write_text(AGENT, encoding="utf-8")
    slack = FakeSlack()
    await slack.__aenter__()
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    slack.add_user("U2", "bob", display_name="Bob")
    app = AppHarness(
        slack, model=model, data_dir=tmp_path / "data", agent_file=tmp_path / "agent.toml", **settings
    )
    await app.__aenter__()
    ts = slack.add_message("C1", "<@UBOT> plan the release", user="U1")
    await app.deliver(events.app_mention("C1", "U1", "<@UBOT> plan the release", ts))
    return slack, app


async def finish(slack: FakeSlack, app: AppHarness) -> None:
    await app.idle()
    await app.__aexit__(None, None, None)
    await slack.__aexit__(None, None, None)


@pytest.mark.process
async def test_a_form_is_answered_on_its_card_and_the_call_goes_on(tmp_path: Path) -> None:
    seen: list[Any] = []
    slack, app = await conversation(tmp_path, recorder("tb_plan_release", seen))
    try:
        card = await form_card(slack)
        labels = [b["label"]["text"] for b in card["blocks"] if b["type"] == "input"]
        assert labels == ["Version", "Replicas", "Canary first", "Region"]
        assert "Which release do you want?" in json.dumps(card["blocks"])
        # Bob is not the requester: told privately, nothing changes.
        assert (
            await app.click(click(slack, card, "U2", FORM_SUBMIT, {"version": "9", "region": "us"}))
        ).status == 200
        # Alice leaves a required field empty, then types a word for a number: refused, still open.
        await app.click(click(slack, card, "U1", FORM_SUBMIT, {"region": "eu"}))
        await app.click(
            click(slack, card, "U1", FORM_SUBMIT, {"version": "2.1", "region": "eu", "replicas": "x"})
        )
        values = {"version": "2.1.0", "replicas": "3", "canary": "false", "region": "eu"}
        assert (await app.click(click(slack, card, "U1", FORM_SUBMIT, values))).status == 200
        await app.idle()
    finally:
        await finish(slack, app)
    [(_, result)] = [r for r in seen if r[0] == "tb_plan_release"]
    answer = result if isinstance(result, dict) else json.loads(result)
    assert answer == {
        "action": "accept",
        "content": {"version": "2.1.0", "replicas": 3, "canary": False, "region": "eu"},
    }
    told = [c.params for c in slack.calls_to("chat.postEphemeral")]
    assert [t["user"] for t in told] == ["U2", "U1", "U1"]
    assert "Only <@U1> can answer" in told[0]["text"] and "Version is required" in told[1]["text"]
    assert "Replicas must be a whole number" in told[2]["text"]
    [decided] = [m for m in slack.bot_messages("C1") if m["ts"] == card["ts"]]
    assert not any(b["type"] in ("input", "actions") for b in decided["blocks"])
    assert "answered" in json.dumps(decided["blocks"])


@pytest.mark.process
@pytest.mark.parametrize(("button", "action"), [(FORM_DECLINE, "decline"), (FORM_CANCEL, "cancel")])
async def test_declining_or_cancelling_a_form_tells_the_server(
    tmp_path: Path, button: str, action: str
) -> None:
    seen: list[Any] = []
    slack, app = await conversation(tmp_path, recorder("tb_plan_release", seen))
    try:
        card = await form_card(slack)
        await app.click(click(slack, card, "U1", button, {}))
    finally:
        await finish(slack, app)
    [(_, result)] = [r for r in seen if r[0] == "tb_plan_release"]
    answer = result if isinstance(result, dict) else json.loads(result)
    assert answer["action"] == action


@pytest.mark.process
async def test_an_unanswered_form_times_out_as_cancel(tmp_path: Path) -> None:
    seen: list[Any] = []
    slack, app = await conversation(
        tmp_path, recorder("tb_plan_release", seen), mcp_elicitation_timeout_s=1.0
    )
    try:
        card = await form_card(slack)
        await app.idle()
    finally:
        await finish(slack, app)
    [(_, result)] = [r for r in seen if r[0] == "tb_plan_release"]
    answer = result if isinstance(result, dict) else json.loads(result)
    assert answer["action"] == "cancel"
    [decided] = [m for m in slack.bot_messages("C1") if m["ts"] == card["ts"]]
    assert "Expired" in json.dumps(decided["blocks"])


@pytest.mark.process
async def test_a_link_goes_to_the_requester_privately(tmp_path: Path) -> None:
    seen: list[Any] = []
    slack, app = await conversation(tmp_path, recorder("tb_open_dashboard", seen))
    await finish(slack, app)
    assert ("tb_open_dashboard", "link: accept") in seen
    [told] = [c.params for c in slack.calls_to("chat.postEphemeral")]
    assert told["user"] == "U1" and "https://dash.example/login?s=1" in told["text"]
    assert not any("dash.example" in json.dumps(m) for m in slack.messages("C1"))


def test_a_form_a_card_cannot_hold_is_refused() -> None:
    with pytest.raises(Unshowable, match="nested"):
        form_inputs({"type": "object", "properties": {"nested": {"type": "object"}}})
    assert form_inputs({"type": "object", "properties": {}}) == ()


def test_form_content_is_typed_as_the_form_asks() -> None:
    inputs = form_inputs(
        {
            "type": "object",
            "properties": {
                "n": {"type": "number"},
                "ok": {"type": "boolean"},
                "pick": {
                    "type": "string",
                    "oneOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}],
                },
            },
            "required": ["pick"],
        }
    )
    assert [i.kind for i in inputs] == ["number", "boolean", "choice"] and inputs[2].options == ("a", "b")
    assert form_content({"n": "1.5", "ok": "true", "pick": "b"}, inputs) == {
        "n": 1.5,
        "ok": True,
        "pick": "b",
    }
    with pytest.raises(ValueError, match="must be one of a, b"):
        form_content({"pick": "c"}, inputs)
    # A forged click's value longer than any text input holds is refused, not stored.
    with pytest.raises(ValueError, match="longer than 3,000 characters"):
        form_content({"pick": "a", "n": "1" * 3_001}, inputs)
