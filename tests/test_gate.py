"""The approval gate as a real control: cards show every argument whole and visibly, and MCP tools
that are not read-only wait for a person unless the agent file says otherwise."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from app.agent.approval_cards import APPROVE
from app.agent.ask_cards import open_card
from channel.card_fields import argument_fields, visible
from storage.ask_records import AskRecord
from tests.support import events
from tests.support.harness import AppHarness
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
