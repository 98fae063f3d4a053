"""The playground shows the agent's own asks (issue 24) and clicks them: the demo model asks when told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from app.playground import GENERAL, Playground, demo_model
from app.playground.guard import TOKEN_HEADER
from app.settings import Settings

JSON = dict[str, Any]


def _settings(tmp_path: Path) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "agent_file": None,
        "skills_dir": None,
        "sweep_interval": 3600.0,
        "shutdown_grace": 5.0,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def _bot_replies(state: JSON) -> list[JSON]:
    [conversation] = [c for c in state["conversations"] if c["id"] == GENERAL]
    return [r for m in conversation["messages"] for r in m["replies"] if r["bot"]]


async def _settle(pg: Playground) -> None:
    assert pg.service is not None and pg.service.approvals is not None
    for _ in range(3):
        await pg.service.runner.idle()
        await pg.service.approvals.idle()


async def _ask_and_click(tmp_path: Path, text: str, label: str) -> tuple[JSON, list[JSON]]:
    """Alice posts ``text`` to the demo model; its card's ``label`` button is clicked in the page as
    Alice. Returns the card as first shown and the bot's replies at the end."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        await pg.post("U0ALICE", GENERAL, text)
        await _settle(pg)
        [card] = [r for r in _bot_replies(pg.snapshot()) if r["buttons"]]
        button = next(b for b in card["buttons"] if b["label"] == label)
        body = {"as": "U0ALICE", "channel": GENERAL, "ts": card["ts"], **button}
        async with aiohttp.ClientSession(headers={TOKEN_HEADER: pg.page_token}) as http:
            async with http.post(f"{pg.url}api/click", json=body) as response:
                assert response.status == 200 and (await response.json()) == {"status": 200}
        await _settle(pg)
        return card, _bot_replies(pg.snapshot())


async def test_the_page_shows_a_question_card_and_its_click_resumes_the_demo(tmp_path: Path) -> None:
    """ "ask me" makes the demo model ask with two option buttons (its turn ends there); clicking one
    in the page answers it: the card says who answered what, loses its buttons, and the demo's next
    answer quotes "Alice answered q_…: That one"."""
    card, replies = await _ask_and_click(tmp_path, "@threadbound ask me something", "That one")
    assert [b["label"] for b in card["buttons"]] == ["This one", "That one"]
    assert "Which one should I pick?" in card["html"]
    [shown] = [r for r in replies if r["ts"] == card["ts"]]
    assert shown["buttons"] == [] and "That one" in shown["html"]
    assert any("Alice answered q_" in r["html"] and "That one" in r["html"] for r in replies)


async def test_the_page_shows_an_approval_card_and_approves_it(tmp_path: Path) -> None:
    """ "request approval" posts an Approve/Deny card; Approve in the page resumes the demo with it."""
    card, replies = await _ask_and_click(tmp_path, "@threadbound request approval please", "Approve")
    assert [b["label"] for b in card["buttons"]] == ["Approve", "Deny"]
    [shown] = [r for r in replies if r["ts"] == card["ts"]]
    assert shown["buttons"] == [] and "Approved" in shown["html"]
    assert any("Alice approved ap_" in r["html"] for r in replies)
