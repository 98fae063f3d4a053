"""The approval gate as a real control: cards show every argument whole and visibly, and MCP tools
that are not read-only wait for a person unless the agent file says otherwise."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from app.agent.agent_file import AgentFile
from app.agent.approval_cards import APPROVE
from app.agent.approval_policy import ApprovalPolicy, approver_warnings
from app.agent.ask_cards import open_card
from app.ops.check import run_checks
from channel.card_fields import argument_fields, visible
from storage.ask_records import AskRecord
from tests.support import events
from tests.support.harness import AppHarness, settings_for
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

PYTHON = sys.executable.replace("\\", "/")
TICKETS = (Path(__file__).parent / "support" / "mcp_tickets.py").as_posix()


def _agent(tmp_path: Path, head: str = "", server: str = "") -> Path:
    """An agent file running the tickets MCP server with every tool eager."""
    path = tmp_path / "agent.toml"
    path.write_text(
        f'{head}\n[mcp.tickets]\ncommand = ["{PYTHON}", "{TICKETS}"]\neager = ["*"]\ntimeout = 5\n{server}\n',
        encoding="utf-8",
    )
    return path


def _cards(slack: FakeSlack) -> list[dict[str, Any]]:
    return [
        m for m in slack.bot_messages("C1") if any(b.get("type") == "actions" for b in m.get("blocks", []))
    ]


def _card_text(card: dict[str, Any]) -> str:
    return "\n".join(b["text"]["text"] for b in card["blocks"] if b["type"] == "section")


async def _ask(app: AppHarness, slack: FakeSlack, text: str) -> str:
    root = slack.add_message("C1", text, user="U1")
    assert (await app.deliver(events.app_mention("C1", "U1", text, root))).status == 200
    await app.idle()
    assert app.service is not None
    await app.service.approvals.idle()
    return root


def _calling(tool: str, results: list[Any], **args: Any) -> Any:
    def script(turn: Turn) -> list[Any]:
        if turn.prompt and "please" in turn.prompt:
            return [call(tool, **args)]
        for name, result in turn.results:
            if name == tool:
                results.append(result)
                return [call("channel_reply", text="done")]
        return [""]

    return script


@pytest.mark.process
async def test_a_long_value_among_many_keys_is_shown_whole_on_the_card(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """The review's finding: with many keys, a value was cut to 24 characters and the call stayed
    approvable, hiding ``"; DROP TABLE users;"``; now every value is on the card whole, invisible
    characters are shown by code point, and the call can be approved."""
    query = 'SELECT name FROM accounts WHERE id = "1"; DROP TABLE users; -- and nothing more here'
    meta = {f"m{i}": "y" * 70 for i in range(450)}
    results: list[Any] = []
    script = _calling("tickets_notify", results, body=query, to="ops\u202e@example.com\u200b", meta=meta)
    agent = _agent(tmp_path, 'approval = ["tickets_notify"]')
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path / "d", agent_file=agent) as app:
        await _ask(app, slack, "<@UBOT> please notify ops")
        [card] = _cards(slack)
        text = _card_text(card)
        assert "DROP TABLE users; -- and nothing more here" in text and "more characters" not in text
        assert 'to: "ops&lt;U+202E&gt;@example.com&lt;U+200B&gt;"' in text
        assert "\u202e" not in json.dumps(card["blocks"], ensure_ascii=False)
        assert all(f'm{i}: "{"y" * 70}"' in text for i in range(450))
        actions = next(b for b in card["blocks"] if b["type"] == "actions")
        assert next(e["action_id"] for e in actions["elements"]) == APPROVE
        assert results == []


def test_invisible_and_bidirectional_characters_are_shown_by_code_point() -> None:
    """Zero-width characters, BiDi overrides and isolates, tags, controls and look-alike spaces are
    written as ``<U+…>``; letters, accents, emoji and plain spaces stay as they are."""
    hidden = [
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        *range(0x200B, 0x2010),
        0xFEFF,
        0xE0041,
        0x85,
        0xA0,
    ]
    for code in hidden:
        assert visible(f"a{chr(code)}b") == f"a<U+{code:04X}>b"
    assert visible("Grüße, 東京 🎉 ok") == "Grüße, 東京 🎉 ok"
    assert visible("line\nnext", keep="\n") == "line\nnext" and visible("a\nb") == "a<U+000A>b"
    [[field]] = argument_fields(json.dumps({"to\u2066": "x\u202ey"}))
    assert field.line == '"to<U+2066>": "x<U+202E>y"'


def test_an_approval_request_card_shows_hidden_characters_of_the_models_text() -> None:
    """``channel_request_approval``'s card shows what a reader could not see in the model's text."""
    ask = AskRecord(
        ask_id="ask_1",
        task_id="t1",
        kind="approval",
        text="Delete the \u202estaging\u202c database?",
        details="",
        options=(),
        only_requester=True,
        requester="U1",
        channel="C1",
        thread_ts="",
        card_ts="",
        created_at=1_700_000_000.0,
    )
    card = open_card(ask, 3600.0)
    assert card.body == ("Delete the <U+202E>staging<U+202C> database?",)


@pytest.mark.process
@pytest.mark.parametrize(
    ("head", "server", "waits"),
    [
        ("", "", True),  # the default: not marked read-only, so it waits
        ('approval_default = "listed_only"', "", False),  # only what `approval` names waits
        ("", 'read_only = ["close_*"]', False),  # the agent file declares it read-only
        ('approval = ["tickets_close_*"]', 'read_only = ["close_*"]', True),  # a name always gates
    ],
)
async def test_an_mcp_tool_not_marked_read_only_waits_for_approval_by_default(
    slack: FakeSlack, tmp_path: Path, head: str, server: str, waits: bool
) -> None:
    """With no ``approval`` at all, ``tickets_close_ticket`` (no ``readOnlyHint``) posts a card instead
    of running, while ``tickets_get_ticket`` (marked read-only by its server) runs at once; the
    agent file can turn the default off or declare tools read-only, and a listed name always waits."""
    results: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt and "please" in turn.prompt:
            return [call("tickets_get_ticket", ticket_id=2), call("tickets_close_ticket", ticket_id=2)]
        results.extend(turn.results)
        return [call("channel_reply", text="done")] if turn.results else [""]

    agent = _agent(tmp_path, head, server)
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path / "d", agent_file=agent) as app:
        await _ask(app, slack, "<@UBOT> please close ticket 2")
        cards = _cards(slack)
    by_tool = dict(results)
    if waits:
        [card] = cards
        assert "tickets_close_ticket" in _card_text(card) and "ticket_id: 2" in _card_text(card)
        assert "tickets_get_ticket" not in json.dumps(card["blocks"])
        assert "tickets_close_ticket" not in by_tool
    else:
        assert cards == [] and by_tool["tickets_close_ticket"] == "ticket #2 closed"
        assert by_tool["tickets_get_ticket"]["title"] == "Export to CSV drops the header row"


def test_approval_default_is_checked_when_the_file_loads(tmp_path: Path) -> None:
    """A misspelt ``approval_default`` stops start-up naming the key and the line."""
    path = tmp_path / "agent.toml"
    path.write_text('instructions = "hi"\napproval_default = "never"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2.*approval_default must be"):
        AgentFile.load(path)
    assert AgentFile.load(None).approval_policy == ApprovalPolicy((), "not_read_only")


def test_the_policy_takes_its_globs_and_approvers_as_inputs() -> None:
    """A policy (from the agent file, or a profile) gates by name, then MCP tools not read-only; the
    approver warning names the gated tools when nobody but the asker can approve."""

    class Tool:
        def __init__(self, read_only: bool) -> None:
            self.read_only = read_only

    policy = ApprovalPolicy(("channel_retract",))
    assert policy.needs_approval("channel_retract") and not policy.needs_approval("channel_reply")
    assert policy.needs_approval("x_write", Tool(False)) and not policy.needs_approval("x_read", Tool(True))
    assert not ApprovalPolicy((), "listed_only").needs_approval("x_write", Tool(False))
    [warning] = approver_warnings(["x_write", "channel_retract"], approvers=())
    assert (
        "2 tools wait for approval (x_write, channel_retract)" in warning and "APPROVERS is empty" in warning
    )
    assert approver_warnings(["x_write"], approvers=("U9",)) == []
    assert "nobody can approve" in approver_warnings(["x_write"], (), "approvers")[0]


@pytest.mark.process
@pytest.mark.parametrize("approvers", [(), ("U9",)])
async def test_check_warns_when_only_the_asker_can_approve_gated_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approvers: tuple[str, ...]
) -> None:
    """``check`` starts the MCP servers, sees which tools wait for approval (here every one not
    marked read-only) and WARNs when no ``APPROVERS`` is set, since the asker then approves their own call."""
    monkeypatch.chdir(tmp_path)
    agent = _agent(tmp_path, 'approval = ["channel_retract"]')
    warned = await _approval_lines(tmp_path, agent, approvers)
    if approvers:
        assert warned == []
    else:
        [line] = warned
        assert line.startswith("WARN") and "APPROVERS is empty" in line
        assert "channel_retract" in line and "tickets_close_ticket" in line and "tickets_notify" in line
        assert "tickets_get_ticket" not in line


@pytest.mark.process
async def test_check_warns_when_listed_only_lets_unmarked_mcp_tools_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``approval_default = "listed_only"``, ``check`` names the MCP tools that change things
    and now run with nobody's approval."""
    monkeypatch.chdir(tmp_path)
    agent = _agent(tmp_path, 'approval_default = "listed_only"')
    [line] = await _approval_lines(tmp_path, agent, ("U9",))
    assert line.startswith("WARN") and "tickets_close_ticket" in line and "tickets_get_ticket" not in line


async def _approval_lines(tmp_path: Path, agent: Path, approvers: tuple[str, ...]) -> list[str]:
    """The ``approvals`` lines of ``check`` with ``agent`` and ``APPROVERS``."""
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path / "data", agent_file=agent, approvers=approvers)
        out = io.StringIO()
        await run_checks(settings, model=False, out=out)
    return [line for line in out.getvalue().splitlines() if "  approvals  " in line]
