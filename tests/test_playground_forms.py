"""The playground shows an MCP server's form as a card with fields, and a click sends what they hold."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.playground import GENERAL, Playground
from app.playground.guard import TOKEN_HEADER
from app.settings import Settings
from tests.support.models import Turn, call, scripted

JSON = dict[str, Any]
PYTHON = sys.executable.replace("\\", "/")
TALKBACK = (Path(__file__).parent / "support" / "mcp_talkback.py").as_posix()


def _replies(state: JSON) -> list[JSON]:
    [conversation] = [c for c in state["conversations"] if c["id"] == GENERAL]
    return [r for m in conversation["messages"] for r in m["replies"] if r["bot"]]


@pytest.mark.process
async def test_a_form_card_shows_its_fields_and_a_click_sends_them(tmp_path: Path) -> None:
    agent = tmp_path / "agent.toml"
    agent.write_text(
        f'[mcp.tb]\ncommand = ["{PYTHON}", "{TALKBACK}"]\nenv = {{ TALKBACK_SECRET = "unused" }}\n'
        'eager = ["plan_release"]\ntimeout = 60\n',
        encoding="utf-8",
    )
    seen: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        return [call("tb_plan_release")] if turn.step == 0 else [""]

    values: dict[str, Any] = {"data_dir": tmp_path / "data", "agent_file": agent, "skills_dir": None}
    settings = Settings(_env_file=None, sweep_interval=3600.0, shutdown_grace=5.0, **values)  # type: ignore[call-arg]
    async with Playground(settings, model=scripted(script)) as pg:
        await pg.post("U0ALICE", GENERAL, "@threadbound plan the release")
        card: JSON | None = None
        for _ in range(400):
            card = next((r for r in _replies(pg.snapshot()) if r.get("inputs")), None)
            if card is not None:
                break
            await asyncio.sleep(0.05)
        assert card is not None, "the form card was not shown"
        fields = {f["label"]: f for f in card["inputs"]}
        assert list(fields) == ["Version", "Replicas", "Canary first", "Region"]
        assert fields["Region"]["kind"] == "select" and [o["value"] for o in fields["Region"]["options"]] == [
            "eu",
            "us",
        ]
        assert fields["Canary first"]["initial"] == "true" and not fields["Version"]["optional"]
        submit = next(b for b in card["buttons"] if b["label"] == "Submit")
        typed = {fields["Version"]["block_id"]: "3.0", fields["Region"]["block_id"]: "us"}
        body = {"as": "U0ALICE", "channel": GENERAL, "ts": card["ts"], **submit, "values": typed}
        async with aiohttp.ClientSession(headers={TOKEN_HEADER: pg.page_token}) as http:
            async with http.post(f"{pg.url}api/click", json=body) as response:
                assert response.status == 200 and (await response.json()) == {"status": 200}
            bad = {**body, "values": {fields["Region"]["block_id"]: "mars"}}
            async with http.post(f"{pg.url}api/click", json=bad) as response:
                assert response.status == 400  # not an option the page offers
        assert pg.service is not None
        for _ in range(3):
            await pg.service.runner.idle()
    [(_, result)] = [r for r in seen if r[0] == "tb_plan_release"]
    answer = result if isinstance(result, dict) else json.loads(result)
    assert answer == {"action": "accept", "content": {"version": "3.0", "region": "us", "canary": True}}


@pytest.mark.process
@pytest.mark.browser
async def test_a_form_is_filled_in_and_submitted_in_the_browser(tmp_path: Path) -> None:
    """In chromium: the form card's fields are typed into and picked, Submit sends them, and the
    server's call reads them."""
    from tests.test_playground_browser import CHROMIUM, async_playwright

    if async_playwright is None or CHROMIUM is None:
        pytest.skip("needs playwright and chromium (see tests/test_playground_browser.py)")
    agent = tmp_path / "agent.toml"
    agent.write_text(
        f'[mcp.tb]\ncommand = ["{PYTHON}", "{TALKBACK}"]\nenv = {{ TALKBACK_SECRET = "unused" }}\n'
        'eager = ["plan_release"]\ntimeout = 60\n',
        encoding="utf-8",
    )
    seen: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        return [call("tb_plan_release")] if turn.step == 0 else ["planned"]

    values: dict[str, Any] = {"data_dir": tmp_path / "data", "agent_file": agent, "skills_dir": None}
    settings = Settings(_env_file=None, sweep_interval=3600.0, shutdown_grace=5.0, **values)  # type: ignore[call-arg]
    async with Playground(settings, model=scripted(script)) as pg, async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            await page.goto(pg.url)
            await page.select_option("#person", "U0ALICE")
            await page.click("#mention")
            await page.type("#text", "plan the release")
            await page.press("#text", "Enter")
            version = page.locator('.form input[data-block-id="in:version"]')
            await version.wait_for(timeout=30_000)
            await version.fill("4.2")
            await page.locator('.form input[data-block-id="in:replicas"]').fill("2")
            await page.select_option('.form select[data-block-id="in:region"]', "eu")
            await page.locator("button.bk", has_text="Submit").click()
            await page.locator(".msg.bot .text", has_text="planned").wait_for(timeout=30_000)
        finally:
            await browser.close()
    [(_, result)] = [r for r in seen if r[0] == "tb_plan_release"]
    answer = result if isinstance(result, dict) else json.loads(result)
    assert answer["content"] == {"version": "4.2", "replicas": 2, "region": "eu", "canary": True}
